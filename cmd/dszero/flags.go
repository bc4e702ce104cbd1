package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
)

// alias is one setting that several flag names reach: dszero's own and
// the name DeepSpeed's launcher or HF's Trainer gives it (--nproc and
// --num_gpus, --save and --output_dir). Giving two of the names different
// values is an error, not last-one-wins.
type alias[T comparable] struct {
	p     *T
	names []string // dszero's name first
	by    string   // the name that set it; "" while it holds its default
	parse func(string) (T, error)
}

// aliasVar registers names (the first is dszero's) for *p.
func aliasVar[T comparable](fs *flag.FlagSet, p *T, parse func(string) (T, error), usage string, names ...string) *alias[T] {
	a := &alias[T]{p: p, names: names, parse: parse}
	for i, n := range names {
		u := usage
		if i > 0 {
			u = "alias of --" + names[0]
		}
		fs.Var(aliasFlag[T]{a, n}, n, u)
	}
	return a
}

// set reports whether any of the names was given.
func (a *alias[T]) set() bool { return a.by != "" }

type aliasFlag[T comparable] struct {
	a    *alias[T]
	name string
}

func (f aliasFlag[T]) String() string {
	if f.a == nil {
		return ""
	}
	return fmt.Sprint(*f.a.p)
}

func (f aliasFlag[T]) Set(s string) error {
	v, err := f.a.parse(s)
	if err != nil {
		return err
	}
	if f.a.by != "" && f.a.by != f.name && v != *f.a.p {
		return fmt.Errorf("--%s already gave %v; --%s and --%s are one setting, give one", f.a.by, *f.a.p, f.a.by, f.name)
	}
	*f.a.p, f.a.by = v, f.name
	return nil
}

// aliases are the flag's names, dszero's first (printFlags lists them
// together).
func (f aliasFlag[T]) aliases() []string { return f.a.names }

// typeName is what printFlags shows as the flag's argument.
func (f aliasFlag[T]) typeName() string {
	var zero T
	switch any(zero).(type) {
	case int, int64:
		return "int"
	case string:
		return "string"
	}
	return "value"
}

func (f aliasFlag[T]) IsBoolFlag() bool {
	var zero T
	_, ok := any(zero).(bool)
	return ok
}

func parseString(s string) (string, error) { return s, nil }

// atLeast parses a whole number ≥ lo; what says what it counts.
func atLeast(lo int, what string) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("want a whole number of %s", what)
		}
		if n < lo {
			return 0, fmt.Errorf("want %d or more %s", lo, what)
		}
		return n, nil
	}
}

// intAtLeast registers an int flag that refuses values below lo, so that
// a mistyped -1 or 0 is an error instead of quietly meaning the default.
func intAtLeast(fs *flag.FlagSet, p *int, name string, lo int, what, usage string) {
	aliasVar(fs, p, atLeast(lo, what), usage, name)
}

// parseBudget reads a --device-memory value. A unit is required: "4"
// would otherwise be 4 bytes, which nobody means.
func parseBudget(flagName, s string) (int64, error) {
	t := strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(t, 64); err == nil {
		return 0, fmt.Errorf("%s %s: give a unit, e.g. %sGiB or %sMiB (%sB if you mean %s bytes)", flagName, s, t, t, t, t)
	}
	n, err := device.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flagName, err)
	}
	return n, nil
}

// hfOptions are HF TrainingArguments flags. Given, they fill "auto" the
// way HF's Trainer does (HF mode) — except the micro-batch given alone
// (--per_device_train_batch_size, or dszero's --micro-batch), which only
// sets train_micro_batch_size_per_gpu and leaves DeepSpeed's reading of
// the rest of the config as it is.
type hfOptions struct {
	fs         *flag.FlagSet
	a          dsconfig.HFArgs
	microBatch int64 // --micro-batch, 0 when not given
	micro      *alias[int64]
}

// hfNames are the flags that switch HF mode on.
var hfNames = []string{"learning_rate", "gradient_accumulation_steps", "max_grad_norm", "warmup_steps",
	"max_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "fp16", "bf16", "hidden_size"}

// hfFlags registers HF's TrainingArguments flags and the micro-batch.
func hfFlags(fs *flag.FlagSet) *hfOptions {
	h := &hfOptions{fs: fs, a: dsconfig.DefaultHFArgs()}
	a := &h.a
	fs.Float64Var(&a.LearningRate, "learning_rate", a.LearningRate, "HF: learning rate")
	h.micro = aliasVar(fs, &h.microBatch, func(s string) (int64, error) {
		n, err := atLeast(1, "samples")(s)
		return int64(n), err
	}, "samples per rank per micro-step: sets train_micro_batch_size_per_gpu; with other HF flags, HF's --per_device_train_batch_size filling \"auto\" (default: the config's; HF's 8 in HF mode)",
		"micro-batch", "per_device_train_batch_size")
	fs.Int64Var(&a.GradientAccumulationSteps, "gradient_accumulation_steps", a.GradientAccumulationSteps, "HF: accumulation steps")
	fs.Float64Var(&a.MaxGradNorm, "max_grad_norm", a.MaxGradNorm, "HF: gradient clipping")
	fs.Int64Var(&a.WarmupSteps, "warmup_steps", a.WarmupSteps, "HF: warmup steps")
	fs.Int64Var(&a.MaxSteps, "max_steps", a.MaxSteps, "HF: total optimizer steps")
	fs.Float64Var(&a.WeightDecay, "weight_decay", a.WeightDecay, "HF: weight decay")
	fs.Float64Var(&a.AdamBeta1, "adam_beta1", a.AdamBeta1, "HF: Adam beta1")
	fs.Float64Var(&a.AdamBeta2, "adam_beta2", a.AdamBeta2, "HF: Adam beta2")
	fs.Float64Var(&a.AdamEpsilon, "adam_epsilon", a.AdamEpsilon, "HF: Adam epsilon")
	fs.BoolVar(&a.FP16, "fp16", false, "HF: fp16 mixed precision")
	fs.BoolVar(&a.BF16, "bf16", false, "HF: bf16 mixed precision")
	fs.Int64Var(&a.HiddenSize, "hidden_size", 0, "the model's hidden size (for \"auto\" bucket sizes)")
	return h
}

// args is the HF arguments in HF mode (an HF flag other than the
// micro-batch was given), else nil.
func (h *hfOptions) args() *dsconfig.HFArgs {
	set := false
	h.fs.Visit(func(f *flag.Flag) {
		for _, n := range hfNames {
			set = set || f.Name == n
		}
	})
	if !set {
		return nil
	}
	a := h.a
	if h.micro.set() {
		a.PerDeviceTrainBatchSize = h.microBatch
	}
	return &a
}

// microOverride is the micro-batch to write into the config outside HF
// mode, 0 for none.
func (h *hfOptions) microOverride() int64 {
	if h.args() != nil || !h.micro.set() {
		return 0
	}
	return h.microBatch
}

// forFSDP is the HF arguments an FSDP setup's ds_config is filled from:
// HF mode's, or with the micro-batch alone, the Trainer's defaults with
// that micro-batch (nil: the Trainer's defaults).
func (h *hfOptions) forFSDP() *dsconfig.HFArgs {
	if a := h.args(); a != nil {
		return a
	}
	if n := h.microOverride(); n > 0 {
		a := dsconfig.DefaultHFArgs()
		a.PerDeviceTrainBatchSize = n
		return &a
	}
	return nil
}

// options are the dsconfig options for a world of ranks.
func (h *hfOptions) options(world int) dsconfig.Options {
	return dsconfig.Options{WorldSize: world, HF: h.args()}
}

// newFlagSet is a subcommand's flag set. A bad flag prints the flag
// package's one-line error and a pointer to the command's help, not the
// whole flag list; asked for -h with a flagHelp as stderr (by dszero
// help), it writes its flags there.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		if h, ok := stderr.(*flagHelp); ok {
			printFlags(h, fs)
			return
		}
		fmt.Fprintf(stderr, "run 'dszero help %s' for its flags and examples\n", strings.TrimPrefix(name, "dszero "))
	}
	return fs
}

// flagHelp collects a command's flag list for dszero help.
type flagHelp struct{ strings.Builder }

// printFlags lists a flag set's flags, sorted, in the style the help
// text uses: --name TYPE, the names of one setting on one line
// (--nproc, --num_gpus int), defaults shown unless zero.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		names := []string{f.Name}
		if a, ok := f.Value.(interface{ aliases() []string }); ok {
			if names = a.aliases(); names[0] != f.Name {
				return // listed under dszero's name
			}
		}
		typ, usage := flag.UnquoteUsage(f)
		if t, ok := f.Value.(interface{ typeName() string }); ok && typ == "value" {
			typ = t.typeName()
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			typ = ""
		}
		line := "  --" + strings.Join(names, ", --")
		if typ != "" {
			line += " " + typ
		}
		switch f.DefValue {
		case "", "0", "false":
		default:
			if typ == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}
