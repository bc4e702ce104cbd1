package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/dsconfig/lenient"
)

// microKey is the config key --micro-batch sets.
const microKey = "train_micro_batch_size_per_gpu"

// readDSConfig returns a ds_config's name and bytes: the file (or JSON
// string, or base64) at path, or with path "" the embedded default of
// dszero train. A micro-batch given alone on the command line (see
// hfOptions) is written into it, so that every diagnostic still points at
// the file's own lines; note then says so.
func readDSConfig(path string, hf *hfOptions) (name string, raw []byte, note string, err error) {
	name, raw = "<embedded default ds_config>", defaultConfig
	if path != "" {
		if name, raw, err = dsconfig.ReadInput(path); err != nil {
			return "", nil, "", err
		}
	}
	if hf == nil {
		return name, raw, "", nil
	}
	if n := hf.microOverride(); n > 0 {
		var was string
		if raw, was, err = setTopLevelNumber(name, raw, microKey, n); err != nil {
			return "", nil, "", err
		}
		note = fmt.Sprintf("--micro-batch %d sets %s (%s has %s)", n, microKey, name, was)
	}
	return name, raw, note, nil
}

// compileDSConfig reads and compiles a ds_config for world ranks.
func compileDSConfig(path string, world int, hf *hfOptions) (dsconfig.Plan, dsconfig.Diagnostics, string, error) {
	name, raw, note, err := readDSConfig(path, hf)
	if err != nil {
		return dsconfig.Plan{}, nil, "", err
	}
	p, d := dsconfig.Compile(name, raw, hf.options(world))
	return p, d, note, nil
}

// setTopLevelNumber replaces the value of a top-level key with n, or adds
// the key, editing only that value's text: the other lines and columns
// stay where they were. was is what the config had ("no value" when it
// had none). A config that does not parse is returned as it is, for
// dsconfig to report.
func setTopLevelNumber(name string, raw []byte, key string, n int64) (out []byte, was string, err error) {
	root, perr := lenient.Parse(name, raw)
	if perr != nil || root.Kind != lenient.Object {
		return raw, "no value", nil
	}
	num := strconv.FormatInt(n, 10)
	v, ok := root.Get(key)
	if !ok {
		ins := fmt.Sprintf(" %q: %s", key, num)
		if len(root.Members) > 0 {
			ins += ","
		}
		at := root.Pos.Offset + 1 // just inside the top-level '{'
		return splice(raw, at, at, ins), "no value", nil
	}
	end, ok := tokenEnd(raw, v)
	if !ok {
		return nil, "", fmt.Errorf("%s:%s: %s is not a number but %s; --micro-batch replaces a number: write one there, or drop --micro-batch", name, v.Pos, key, withArticle(v.Kind.String()))
	}
	return splice(raw, v.Pos.Offset, end, num), string(raw[v.Pos.Offset:end]), nil
}

// tokenEnd is the offset just past a scalar value's text.
func tokenEnd(raw []byte, v *lenient.Value) (int, bool) {
	at := v.Pos.Offset
	switch v.Kind {
	case lenient.Number:
		return at + len(v.Num), true
	case lenient.Null:
		return at + len("null"), true
	case lenient.Bool:
		return at + len(strconv.FormatBool(v.Bool)), true
	case lenient.String:
		q := raw[at]
		if q != '"' && q != '\'' || at+2 < len(raw) && raw[at+1] == q && raw[at+2] == q {
			return 0, false // a multiline string
		}
		for i := at + 1; i < len(raw); i++ {
			switch raw[i] {
			case '\\':
				i++
			case q:
				return i + 1, true
			}
		}
	}
	return 0, false
}

func splice(b []byte, from, to int, s string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(s))
	out = append(out, b[:from]...)
	out = append(out, s...)
	return append(out, b[to:]...)
}

// withArticle is "an object", "a string".
func withArticle(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}
