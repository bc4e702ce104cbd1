package dsconfig

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// Options select the world size and the "auto" mode.
type Options struct {
	// WorldSize is the number of data-parallel ranks (before dividing by
	// sequence_parallel_size). Zero means 1.
	WorldSize int
	// HF, when non-nil, fills "auto" from HF training arguments (HFMode).
	HF *HFArgs
	// DeepSpeedVersion is whose defaults to apply where DeepSpeed changed
	// one ("0.14.5"); empty means 0.19.5, the version dszero follows. The
	// only such default today is gradient_clipping: 0 (no clipping) up to
	// v0.19.2, 1.0 since v0.19.3 (DeepSpeed PR #8068). The conformance
	// runner passes the reference's version so its cases replay exactly.
	DeepSpeedVersion string
}

// clippingDefault is gradient_clipping's value when the key is absent, for
// the version in opts.
func (o Options) clippingDefault() float64 {
	if v := o.DeepSpeedVersion; v != "" && versionBefore(v, [3]int{0, 19, 3}) {
		return 0
	}
	return 1.0
}

// versionBefore reports whether the dotted version v ("0.14.5", with an
// optional "+local" tail) is older than want. A part that is not a number
// reads as 0.
func versionBefore(v string, want [3]int) bool {
	v, _, _ = strings.Cut(v, "+")
	var got [3]int
	for i, f := range strings.SplitN(v, ".", 3) {
		n, err := strconv.Atoi(f)
		if err == nil {
			got[i] = n
		}
	}
	for i := range got {
		if got[i] != want[i] {
			return got[i] < want[i]
		}
	}
	return false
}

// Load reads a config the three ways DeepSpeed does (see ReadInput). On
// any error it returns a *ConfigError carrying every diagnostic.
func Load(input string, opts Options) (Plan, error) {
	name, data, err := ReadInput(input)
	if err != nil {
		return Plan{}, err
	}
	return finish(Compile(name, data, opts))
}

// ReadInput returns the bytes of a config given the three ways DeepSpeed
// accepts one: a path to a file, a JSON string, or DeepSpeed's
// urlsafe-base64 encoding of one. name is what diagnostics call it: the
// path, "<string>" or "<base64>".
func ReadInput(input string) (name string, data []byte, err error) {
	data, err = os.ReadFile(input)
	if err == nil {
		return input, data, nil
	}
	// Not a readable file: a JSON object, or base64 of one. (A long JSON
	// string fails as a path with "file name too long", not "not exist".)
	trimmed := strings.TrimSpace(input)
	if strings.HasPrefix(trimmed, "{") {
		return "<string>", []byte(input), nil
	}
	dec, derr := base64.URLEncoding.DecodeString(trimmed)
	if derr != nil {
		dec, derr = base64.RawURLEncoding.DecodeString(trimmed)
	}
	if derr == nil && bytes.HasPrefix(bytes.TrimSpace(dec), []byte("{")) {
		return "<base64>", dec, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("config %s: %w", abbreviate(input), err)
	}
	return "", nil, fmt.Errorf("config %s: no such file, and not a JSON object or DeepSpeed's urlsafe-base64 of one; give the path to your ds_config.json", abbreviate(input))
}

// LoadFile reads a ds_config file.
func LoadFile(path string, opts Options) (Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Plan{}, fmt.Errorf("config %s: no such file; give the path to your ds_config.json", path)
		}
		return Plan{}, fmt.Errorf("config %s: %w", path, err)
	}
	return finish(Compile(path, data, opts))
}

func finish(p Plan, diags Diagnostics) (Plan, error) {
	if diags.HasErrors() {
		return Plan{}, &ConfigError{File: p.File, Diags: diags}
	}
	return p, nil
}

func abbreviate(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// Compile parses and validates one config. It always returns every
// diagnostic (sorted by position); the Plan is meaningful only when there
// is no Error among them.
func Compile(file string, data []byte, opts Options) (Plan, Diagnostics) {
	if opts.WorldSize <= 0 {
		opts.WorldSize = 1
	}
	c := &compiler{s: &sink{file: file}, rec: &recorder{}, opts: opts, hfFilled: map[string]bool{}}
	c.plan.File = file
	c.plan.WorldSize = opts.WorldSize
	root, devs, err := lenient.ParseWithDeviations(file, data)
	if err != nil {
		var le *lenient.Error
		if errors.As(err, &le) {
			d := Diagnostic{Severity: Error, File: file, Pos: le.Pos, Line: le.Pos.Line, Col: le.Pos.Col, Msg: le.Msg, Fix: le.Hint}
			return c.plan, Diagnostics{d}
		}
		return c.plan, Diagnostics{{Severity: Error, File: file, Msg: err.Error()}}
	}
	c.root = root
	c.compile()
	c.notJSON(devs)
	c.plan.settings = c.rec.settings
	diags := c.s.diags.Sorted()
	c.plan.diags = diags
	return c.plan, diags
}

// compiler turns the parsed tree into a Plan.
type compiler struct {
	s        *sink
	rec      *recorder
	opts     Options
	root     *lenient.Value
	hfFilled map[string]bool
	plan     Plan
}

func (c *compiler) compile() {
	c.plan.Mode = DeepSpeedMode
	if c.opts.HF != nil {
		c.plan.Mode = HFMode
		c.fillHF()
	}
	top := c.newBlock("", c.root, scalarBlock)
	top.unknownFix = ""
	c.readTop(top)
	top.finish()
	c.crossChecks()
}

// autoFix is the advice for an "auto" value in DeepSpeed mode.
func (c *compiler) autoFix(path string) string {
	if flag, ok := hfFlagFor[path]; ok {
		if c.plan.Mode == HFMode {
			return "HF's Trainer does not fill it here; write a value"
		}
		return fmt.Sprintf("HF's Trainer fills it from %s: pass that flag (dszero then works like the Trainer) or write a value", flag)
	}
	return "HF's Trainer does not fill this key either: write a value"
}

// notJSON reports the Hjson syntax a config uses outside JSON, once per
// kind at its first place. DeepSpeed reads it; HF's Trainer and Accelerate
// read a ds_config file with json.load (accelerate's HfDeepSpeedConfig), and
// json.load rejects it. A missing comma is a warning in both modes: it is a
// slip, not a style. The deliberate Hjson (comments, trailing commas, ...)
// is a warning in HFMode, where the file is headed for the Trainer, and
// otherwise an info.
func (c *compiler) notJSON(devs []lenient.Deviation) {
	count := map[lenient.DeviationKind]int{}
	var first []lenient.Deviation
	for _, d := range devs {
		if count[d.Kind] == 0 {
			first = append(first, d)
		}
		count[d.Kind]++
	}
	for _, d := range first {
		sev := Info
		if d.Kind == lenient.MissingComma || c.plan.Mode == HFMode {
			sev = Warning
		}
		what := d.Kind.String()
		if n := count[d.Kind] - 1; n > 0 {
			what += fmt.Sprintf(" (and %d more)", n)
		}
		msg := what + ": not JSON. DeepSpeed's Hjson reader accepts it, but HF's Trainer and Accelerate read a ds_config with json.load, which rejects the file"
		if d.Kind == lenient.MissingComma {
			msg = what + " between two values: DeepSpeed's Hjson reader accepts it, but it is not JSON, and HF's Trainer and Accelerate read a ds_config with json.load, which rejects the file"
		}
		v := &lenient.Value{Pos: d.Pos}
		c.s.add(sev, v, "", msg, notJSONFix[d.Kind])
	}
}

var notJSONFix = map[lenient.DeviationKind]string{
	lenient.ByteOrderMark:     "save the file as UTF-8 without a byte order mark",
	lenient.Comment:           "remove the comments if HF's Trainer or Accelerate reads this file",
	lenient.TrailingComma:     "remove the comma before the closing bracket",
	lenient.MissingComma:      "add the comma",
	lenient.UnquotedKey:       "quote the key",
	lenient.SingleQuotes:      "use double quotes",
	lenient.MultilineString:   `write a "double-quoted" string, with \n for line breaks`,
	lenient.QuoteEscape:       `write ' without the backslash`,
	lenient.RootWithoutBraces: "wrap the whole file in { }",
	lenient.OddWhiteSpace:     "replace it with plain spaces",
}
