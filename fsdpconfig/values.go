package fsdpconfig

import (
	"fmt"
	"strconv"
	"strings"
)

// The plugin's string forms, as FullyShardedDataParallelPlugin parses
// them (accelerate/utils/dataclasses.py, constants.py).

// parseStrategy reads a sharding strategy: a name in any case, or the
// torch enum value 1–5 as digits.
func parseStrategy(s string) (Strategy, string) {
	u := strings.ToUpper(s)
	for i, name := range strategyNames[1:] {
		if u == name {
			return Strategy(i + 1), ""
		}
	}
	if isDigit(s) {
		if v, err := strconv.Atoi(s); err == nil && v >= 1 && v <= 5 {
			return Strategy(v), ""
		}
		return 0, fmt.Sprintf("%s is not a valid ShardingStrategy (1–5)", s)
	}
	return 0, fmt.Sprintf("%q is not a sharding strategy", s)
}

// parsePrefetch reads a backward prefetch policy: BACKWARD_PRE,
// BACKWARD_POST, NO_PREFETCH in any case, or 1 and 2.
func parsePrefetch(s string) (Prefetch, string) {
	u := strings.ToUpper(s)
	switch u {
	case "NO_PREFETCH":
		return NoPrefetch, ""
	case "BACKWARD_PRE":
		return BackwardPre, ""
	case "BACKWARD_POST":
		return BackwardPost, ""
	}
	if isDigit(s) {
		if v, err := strconv.Atoi(s); err == nil && (v == 1 || v == 2) {
			return Prefetch(v), ""
		}
		return 0, fmt.Sprintf("%s is not a valid BackwardPrefetch (1 or 2)", s)
	}
	return 0, fmt.Sprintf("%q is not a backward prefetch policy", s)
}

// parseStateDict reads a state dict type: the torch enum value as digits,
// or a name in any case.
func parseStateDict(s string) (StateDict, string) {
	if isDigit(s) {
		if v, err := strconv.Atoi(s); err == nil && v >= 1 && v <= 3 {
			return StateDict(v), ""
		}
		return 0, fmt.Sprintf("%s is not a valid StateDictType (1–3)", s)
	}
	u := strings.ToUpper(s)
	for i, name := range stateDictNames[1:] {
		if u == name {
			return StateDict(i + 1), ""
		}
	}
	return 0, fmt.Sprintf("%q is not a state dict type", s)
}

// parseWrap reads an auto wrap policy name in any case.
func parseWrap(s string) (Wrap, string) {
	u := strings.ToUpper(s)
	for i, name := range wrapNames {
		if u == name {
			return Wrap(i), ""
		}
	}
	return 0, fmt.Sprintf("Invalid auto wrap policy: %s. Must be one of %s", s, pyList(wrapOrder))
}

// wrapOrder is accelerate's FSDP_AUTO_WRAP_POLICY order.
var wrapOrder = []string{"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"}

func pyList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = "'" + x + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// enum reads field f with parse. A bad value is an error at f, with the
// closest of names as the fix, and ok is false.
func enum[T any](r *reader, f field, parse func(string) (T, string), names []string) (v T, ok bool) {
	v, msg := parse(f.n.pyStr())
	if msg != "" {
		r.s.errorf(f.n.pos, f.written, enumFix(f.n.pyStr(), names), "%s", msg)
		return v, false
	}
	return v, true
}

// enumFix suggests a valid name for a misspelt enum value.
func enumFix(s string, names []string) string {
	return didYouMean(s, names, "write one of "+quoteList(names))
}

// blockLike reports whether a class name looks like a transformer block
// (GPT2Block, LlamaDecoderLayer, BertLayer, T5Block) and embedLike whether
// it names embeddings, which dszero's units already gather on their own.
func blockLike(name string) bool {
	for _, suf := range []string{"Block", "DecoderLayer", "EncoderLayer", "Layer"} {
		if strings.HasSuffix(name, suf) && len(name) > len(suf) {
			return true
		}
	}
	return false
}

func embedLike(name string) bool { return strings.Contains(name, "Embedding") }

// splitClasses is accelerate's transformer_cls_names_to_wrap.split(","):
// no trimming, so "A, B" names the class " B".
func splitClasses(s string) []string { return strings.Split(s, ",") }
