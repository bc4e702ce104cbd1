package fsdpconfig

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/dsconfig/lenient"
)

// Diagnostics are dsconfig's, so that `dszero config check` prints FSDP and
// DeepSpeed configs alike: `file:line:col: path: severity: message; fix`.
type (
	Severity    = dsconfig.Severity
	Diagnostic  = dsconfig.Diagnostic
	Diagnostics = dsconfig.Diagnostics
)

// The severities, as in dsconfig.
const (
	// Error: Accelerate or the Trainer would reject the config, or would
	// silently run something else than it says (a duplicate key).
	Error = dsconfig.Error
	// Warning: accepted, but something does not do what it looks like (an
	// ignored key, an old spelling, a default that loses FSDP's benefit).
	Warning = dsconfig.Warning
	// Unsupported: a valid FSDP setup that dszero's engine does not run yet
	// (hybrid groups, offload); `config check` passes, `train` refuses.
	Unsupported = dsconfig.Unsupported
	// Info: how a value was resolved.
	Info = dsconfig.Info
)

// AsError returns nil when diags hold no Error, else a
// *dsconfig.ConfigError carrying every diagnostic.
func AsError(file string, diags Diagnostics) error {
	if !diags.HasErrors() {
		return nil
	}
	return &dsconfig.ConfigError{File: file, Diags: diags}
}

// Source says where a resolved value came from.
type Source int

const (
	FromFile           Source = iota // written in the config
	FromOldSpelling                  // written under an older key (offload_params, fsdp_backward_prefetch_policy)
	FromTrainerFlag                  // HF Trainer's --fsdp option string
	FromLaunchDefault                // accelerate launch's argument default, exported as FSDP_* to the plugin
	FromPluginDefault                // FullyShardedDataParallelPlugin's own default
	FromTrainerDefault               // TrainingArguments' default for a missing fsdp_config key
	FromModel                        // taken from the model (_no_split_modules: GPT2Block)
	FromDerived                      // computed from other settings (stage from strategy, group size)
	FromAssumed                      // not given anywhere; dszero assumed it and said so
	FromOption                       // a dszero command-line option (--nproc, --shard-group-size)
)

var sourceNames = [...]string{"file", "old spelling", "--fsdp", "accelerate launch default", "plugin default",
	"Trainer default", "model", "derived", "assumed", "option"}

func (s Source) String() string {
	if s < 0 || int(s) >= len(sourceNames) {
		return fmt.Sprintf("Source(%d)", int(s))
	}
	return sourceNames[s]
}

// MarshalText writes the source's name (for --json).
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Setting is one resolved knob with its provenance.
type Setting struct {
	Name    string `json:"name"`              // canonical name: sharding_strategy, min_num_params, zero.stage, ...
	Value   any    `json:"value"`             // the resolved value
	Source  Source `json:"source"`            // where it came from
	Written string `json:"written,omitempty"` // the key as written (fsdp_config.offload_params)
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Note    string `json:"note,omitempty"` // which default layer, what it means
}

// ValueString formats the value the way it would be written in JSON.
func (s Setting) ValueString() string {
	b, err := json.Marshal(s.Value)
	if err != nil {
		return fmt.Sprint(s.Value)
	}
	return string(b)
}

// sink collects diagnostics and settings for one file.
type sink struct {
	file     string
	diags    Diagnostics
	settings []Setting
}

func (s *sink) add(sev Severity, pos lenient.Pos, path, msg, fix string) {
	d := Diagnostic{Severity: sev, File: s.file, Path: clipWords(path), Msg: clipWords(msg), Fix: clipWords(fix), Pos: pos, Line: pos.Line, Col: pos.Col}
	s.diags = append(s.diags, d)
}

// echoLimit is how many characters of one word a diagnostic keeps. Keys
// and values from the file reach messages in many places (quoted, as a
// path, in a did-you-mean); a 5 MB key must not make a 5 MB message, so
// every run of more than echoLimit non-space characters is cut to that
// many, marked with "…".
const echoLimit = 60

// clipWords cuts every word of s longer than echoLimit characters. It takes
// time linear in len(s).
func clipWords(s string) string {
	if len(s) <= echoLimit {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); { // w: characters of the current word so far
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == ' ' || r == '\n' || r == '\t' {
			w = 0
		} else {
			w++
		}
		switch {
		case w <= echoLimit:
			b.WriteString(s[i : i+n])
		case w == echoLimit+1:
			b.WriteString("…")
		}
		i += n
	}
	return b.String()
}

func (s *sink) errorf(pos lenient.Pos, path, fix, format string, args ...any) {
	s.add(Error, pos, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) warnf(pos lenient.Pos, path, fix, format string, args ...any) {
	s.add(Warning, pos, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) unsupportedf(pos lenient.Pos, path, fix, format string, args ...any) {
	s.add(Unsupported, pos, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) infof(pos lenient.Pos, path, format string, args ...any) {
	s.add(Info, pos, path, fmt.Sprintf(format, args...), "")
}

// set records a setting, replacing an earlier one of the same name.
func (s *sink) set(st Setting) {
	for i := range s.settings {
		if s.settings[i].Name == st.Name {
			s.settings[i] = st
			return
		}
	}
	s.settings = append(s.settings, st)
}

// suggest returns the candidate that s most plausibly misspells, or "":
// a case-insensitive match, a small edit distance, or the same snake_case
// words but one (fsdp_transformer_cls_names_to_wrap →
// fsdp_transformer_layer_cls_to_wrap).
func suggest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestScore := "", 1<<30
	for _, c := range candidates {
		lc := strings.ToLower(c)
		score := editDistance(ls, lc)
		if ls == lc {
			score = 0
		}
		if t := wordDistance(ls, lc); t < score {
			score = t
		}
		if len(ls) >= 3 && strings.HasPrefix(lc, ls+"_") {
			score = min(score, 1) // SIZE → SIZE_BASED_WRAP
		}
		if score < bestScore {
			best, bestScore = c, score
		}
	}
	if bestScore <= min(len(s)/5+1, 3) {
		return best
	}
	return ""
}

// wordDistance counts the snake_case words of a and b not shared, when at
// most two differ on each side; otherwise it is large.
func wordDistance(a, b string) int {
	wa, wb := strings.Split(a, "_"), strings.Split(b, "_")
	if len(wa) < 3 || len(wb) < 3 {
		return 1 << 30
	}
	count := func(xs, ys []string) int {
		n := 0
		for _, x := range xs {
			found := false
			for _, y := range ys {
				found = found || x == y
			}
			if !found {
				n++
			}
		}
		return n
	}
	da, db := count(wa, wb), count(wb, wa)
	if da > 1 || db > 1 {
		return 1 << 30
	}
	return da + db
}

// editDistance is dsconfig's, refusing (as very far) names longer than
// 64 characters: the distance is quadratic, and a YAML key can be anything.
func editDistance(a, b string) int {
	if utf8.RuneCountInString(a) > 64 || utf8.RuneCountInString(b) > 64 {
		return 1 << 30
	}
	return dsconfig.EditDistance(a, b)
}

// didYouMean formats a suggestion as a fix, or returns fallback.
func didYouMean(s string, candidates []string, fallback string) string {
	if c := suggest(s, candidates); c != "" {
		return fmt.Sprintf("did you mean %q?", c)
	}
	return fallback
}
