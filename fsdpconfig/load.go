package fsdpconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// Options say how to read a config and what the command line adds to it.
type Options struct {
	// Dialect forces Accelerate or Trainer; DetectDialect decides from the
	// keys (distributed_type or compute_environment: Accelerate; a
	// top-level fsdp option string or plain fsdp_config keys: Trainer).
	Dialect Dialect
	// TrainerFSDP is HF Trainer's --fsdp option string, such as
	// "full_shard auto_wrap" (Trainer dialect only).
	TrainerFSDP string
	// NumProcesses overrides the config's num_processes (dszero's --nproc);
	// 0 keeps the file's. The Trainer dialect has none in its file.
	NumProcesses int
	// NumMachines overrides num_machines; 0 keeps the file's (default 1).
	NumMachines int
	// ShardGroupSize overrides the group size of a hybrid strategy (by
	// default the processes of one machine); 0 keeps it.
	ShardGroupSize int
	// MixedPrecision is the Trainer's --bf16/--fp16 as "bf16" or "fp16"
	// (Trainer dialect; Accelerate's is in the file); "" means neither.
	MixedPrecision string
	// GradientCheckpointing is the Trainer's --gradient_checkpointing,
	// which the Trainer refuses together with FSDP's activation
	// checkpointing.
	GradientCheckpointing bool
}

// Load reads an FSDP config file and maps it onto the engine. It always
// returns every diagnostic, sorted by position; the Plan is usable only
// when there is no Error among them (AsError turns them into an error).
func Load(path string, opts Options) (Plan, Diagnostics) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		if errors.Is(err, os.ErrNotExist) {
			msg = "no such file"
		}
		return Plan{File: path}, Diagnostics{{Severity: Error, File: path, Msg: msg,
			Fix: "give the path to your accelerate config (YAML) or Trainer fsdp_config (JSON)"}}
	}
	return Compile(path, data, opts)
}

// Compile reads one config from data; file names it in diagnostics and
// decides the syntax as Accelerate does: ".json" is read with json.load,
// anything else with yaml.safe_load.
func Compile(file string, data []byte, opts Options) (Plan, Diagnostics) {
	r := &reader{s: &sink{file: file}, opts: opts}
	r.plan.File = file
	var root *node
	var err error
	isJSON := strings.EqualFold(filepath.Ext(file), ".json")
	if isJSON {
		root, err = parseJSON(file, data)
	} else {
		root, err = parseYAML(data)
	}
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			r.s.add(Error, pe.pos, "", pe.msg, pe.hint)
		} else {
			r.s.add(Error, lenient.Pos{}, "", err.Error(), "")
		}
		return r.done()
	}
	if root.kind != kMap {
		r.s.errorf(root.pos, "", "an FSDP config is a mapping of keys to values", "the top level is %s, not a mapping", root.describe())
		return r.done()
	}
	r.plan.Dialect = r.detect(root)
	switch r.plan.Dialect {
	case Accelerate:
		r.readAccelerate(root)
	case Trainer:
		if !isJSON {
			if _, _, bad := strictJSON(data); bad {
				r.s.warnf(lenient.Pos{Line: 1, Col: 1}, "", "convert it to JSON",
					"the Trainer reads --fsdp_config with json.load, which cannot read this YAML")
			}
		}
		r.readTrainer(root)
	}
	if !r.s.diags.HasErrors() {
		r.mapToEngine()
	}
	return r.done()
}

func (r *reader) done() (Plan, Diagnostics) {
	r.plan.diags = r.s.diags.Sorted()
	r.plan.settings = r.s.settings
	return r.plan, r.plan.Diagnostics()
}

// reader turns a parsed config into a Plan.
type reader struct {
	s        *sink
	opts     Options
	plan     Plan
	blockPos lenient.Pos // where the FSDP settings start, for findings about absent keys
}

// at returns where the first of the named settings was written, else
// where the FSDP settings start.
func (r *reader) at(names ...string) lenient.Pos {
	for _, name := range names {
		for _, st := range r.s.settings {
			if st.Name == name && st.Line > 0 {
				return lenient.Pos{Line: st.Line, Col: st.Col}
			}
		}
	}
	if r.blockPos.Line == 0 {
		return lenient.Pos{Line: 1, Col: 1}
	}
	return r.blockPos
}

// field is one config key as found: its value, how it was written and
// where.
type field struct {
	n       *node
	written string // the key path as written: fsdp_config.offload_params
	pos     lenient.Pos
	src     Source // FromFile or FromOldSpelling
}

func (f field) ok() bool { return f.n != nil }

// record adds a setting from f, or from a default when f is absent.
func (r *reader) record(name string, value any, f field, def Source, note string) {
	st := Setting{Name: name, Value: value, Source: def, Note: note}
	if f.ok() {
		st.Source, st.Written, st.Line, st.Col = f.src, f.written, f.pos.Line, f.pos.Col
		if f.src == FromFile {
			st.Note = ""
		}
	}
	r.s.set(st)
}

// detect decides the dialect from the options and the top-level keys.
func (r *reader) detect(root *node) Dialect {
	_, hasDT := root.get("distributed_type")
	_, hasCE := root.get("compute_environment")
	_, hasFSDP := root.get("fsdp")
	looksAccelerate := hasDT || hasCE
	if !looksAccelerate && !hasFSDP {
		if fc, ok := root.get("fsdp_config"); ok && fc.kind == kMap {
			looksAccelerate = true // an accelerate file missing distributed_type
		}
	}
	d := r.opts.Dialect
	if d == DetectDialect {
		d = Trainer
		if looksAccelerate {
			d = Accelerate
		}
		if d == Accelerate && r.opts.TrainerFSDP != "" {
			r.s.errorf(root.pos, "", "pass an accelerate config on its own (accelerate launch --config_file), or give the Trainer its fsdp_config JSON",
				"--fsdp %q is HF Trainer's option, but this is an accelerate config (it has distributed_type)", r.opts.TrainerFSDP)
		}
	}
	return d
}

// pathOf joins a parent key path and a key.
func pathOf(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// quoteList formats names for messages: "A", "B" or "C".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) <= 1 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
