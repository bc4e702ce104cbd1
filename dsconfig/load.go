package dsconfig

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
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
	root, err := lenient.Parse(file, data)
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
