package profiler

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/dszero/dszero/model"
)

// Options are the ds_config "flops_profiler" keys; "enabled" is the
// caller's (a Profiler exists only when it is true).
type Options struct {
	// ProfileStep is profile_step: the engine profiles the micro-steps
	// run while its count of finished optimizer steps equals it (the
	// count starts at 0, so 1 profiles the second optimizer step).
	ProfileStep int
	// ModuleDepth is module_depth: the aggregated profile covers depths
	// 0 … ModuleDepth-1; -1 means every depth but the deepest.
	ModuleDepth int
	// TopModules is top_modules: the classes listed per depth.
	TopModules int
	// Detailed is detailed: print the module tree with each module's
	// profile.
	Detailed bool
	// OutputFile is output_file: the report's file (rewritten at each
	// print, its directory created); "" prints to stdout.
	OutputFile string
	// RecomputeFwdFactor is recompute_fwd_factor: the share of the
	// forward that activation checkpointing recomputes in backward; the
	// backward is estimated at (2 + factor) × the forward's flops.
	RecomputeFwdFactor float64
}

// DefaultOptions are DeepSpeed's defaults (deepspeed/profiling/constants.py).
func DefaultOptions() Options {
	return Options{ProfileStep: 1, ModuleDepth: -1, TopModules: 1, Detailed: true}
}

// Validate reports every bad option, each naming its ds_config key.
// DeepSpeed accepts some of these and then prints nothing (a negative
// profile_step), slices oddly (top_modules -1 lists all but the last
// class) or fails mid-run (a module_depth past the deepest level); here
// they are refused before training starts.
func (o Options) Validate() error {
	var errs []error
	if o.ProfileStep < 0 {
		errs = append(errs, fmt.Errorf("flops_profiler.profile_step = %d: must be >= 0 (the optimizer step count at which to profile; 0 is the first step)", o.ProfileStep))
	}
	if o.ModuleDepth < -1 {
		errs = append(errs, fmt.Errorf("flops_profiler.module_depth = %d: must be >= 0, or -1 for every depth", o.ModuleDepth))
	}
	if o.TopModules < 0 {
		errs = append(errs, fmt.Errorf("flops_profiler.top_modules = %d: must be >= 0", o.TopModules))
	}
	if f := o.RecomputeFwdFactor; !(f >= 0) || math.IsInf(f, 0) {
		errs = append(errs, fmt.Errorf("flops_profiler.recompute_fwd_factor = %g: must be a finite number >= 0", f))
	}
	return errors.Join(errs...)
}

// Profiler takes DeepSpeed's FLOPS profile of one forward pass and
// prints it. It is driven by the training loop (see the package doc):
// Start before the model's Forward, Stop after it, Print at the step.
// Its Hooks time each unit's forward. Not safe for concurrent use.
type Profiler struct {
	opt     Options
	counter model.FlopCounter
	layout  model.Layout
	now     func() time.Time
	sync    func() error

	started, done bool
	mods          []model.FlopModule
	unitModule    []int       // unit index → index in mods, or -1
	unitStart     []time.Time // per unit: when its forward began
	latency       []float64   // per module: own forward time, seconds
	fwdStart      time.Time
}

// New builds a profiler for the model counter describes. now is the
// clock (time.Now). sync, if set, waits for the device's queued work
// before each timestamp, as DeepSpeed synchronizes the accelerator
// around each module's forward; nil for a CPU model.
func New(counter model.FlopCounter, opt Options, now func() time.Time, sync func() error) (*Profiler, error) {
	if counter == nil || now == nil {
		return nil, errors.New("profiler: New needs a model and a clock")
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	l := counter.Layout()
	return &Profiler{opt: opt, counter: counter, layout: l, now: now, sync: sync,
		unitStart: make([]time.Time, len(l.Units))}, nil
}

// Options returns the profiler's options.
func (p *Profiler) Options() Options { return p.opt }

// Active says whether the micro-step the engine is about to run is
// profiled: its count of finished optimizer steps equals profile_step.
// (DeepSpeed profiles on global rank 0 only; that test is the caller's.)
func (p *Profiler) Active(globalSteps int) bool { return globalSteps == p.opt.ProfileStep }

// Hooks returns hooks that call next (which may be nil) and, while a
// profile is running, time each unit's forward: from the return of
// next.BeforeForward to the return of next.AfterForward. That is
// DeepSpeed's order, whose timing hooks are registered after ZeRO-3's:
// a unit's latency excludes the gather of its parameters and includes
// their release. Backward calls pass straight through.
func (p *Profiler) Hooks(next model.UnitHooks) model.UnitHooks { return &timedHooks{p: p, next: next} }

// Start begins profiling one forward pass of a micro-batch of shape s
// (DeepSpeed's start_profile, in the engine's forward prologue): it
// counts the modules for s, clears every latency and starts the root
// module's clock.
func (p *Profiler) Start(s model.FlopShape) error {
	if p.started {
		return errors.New("profiler: Start while a profile is running")
	}
	if s.Batch <= 0 || s.Seq <= 0 {
		return fmt.Errorf("profiler: micro-batch shape B=%d T=%d, both must be > 0", s.Batch, s.Seq)
	}
	p.mods = p.counter.FlopModules(s)
	p.latency = make([]float64, len(p.mods))
	p.unitModule = make([]int, len(p.layout.Units))
	for u := range p.unitModule {
		p.unitModule[u] = -1
	}
	for i, m := range p.mods {
		if m.Unit != model.NoUnit {
			if m.Unit < 0 || m.Unit >= len(p.unitModule) {
				return fmt.Errorf("profiler: module %q maps onto unit %d; the model has %d", m.Name, m.Unit, len(p.unitModule))
			}
			p.unitModule[m.Unit] = i
		}
	}
	if err := p.syncDevice("the forward"); err != nil {
		return err
	}
	p.started, p.done = true, false
	p.fwdStart = p.now()
	return nil
}

// Stop ends the profile of the forward pass (stop_profile, in the
// forward epilogue): the root module's latency is the time since Start.
// Later forwards and the backward are not counted.
func (p *Profiler) Stop() error {
	if !p.started {
		return errors.New("profiler: Stop without Start")
	}
	if err := p.syncDevice("the forward"); err != nil {
		return err
	}
	p.latency[0] = p.now().Sub(p.fwdStart).Seconds()
	p.started, p.done = false, true
	return nil
}

// Report is the last profiled forward's report, labelled step, with the
// engine's header and timers when e is not nil (its RecomputeFwdFactor
// is taken from the options).
func (p *Profiler) Report(step int, e *Engine) (Report, error) {
	if !p.done {
		return Report{}, errors.New("profiler: no profiled forward to report (Start and Stop it first)")
	}
	if e != nil {
		ee := *e
		ee.RecomputeFwdFactor = p.opt.RecomputeFwdFactor
		e = &ee
	}
	return Report{Step: step, Modules: p.mods, Layout: &p.layout, Latency: p.latency, Engine: e,
		ModuleDepth: p.opt.ModuleDepth, TopModules: p.opt.TopModules, Detailed: p.opt.Detailed}, nil
}

// Print writes the report (see Report) to the output file, or to stdout
// when there is none: print_model_profile.
func (p *Profiler) Print(stdout io.Writer, step int, e *Engine) error {
	r, err := p.Report(step, e)
	if err != nil {
		return err
	}
	if p.opt.OutputFile == "" {
		return Write(stdout, r)
	}
	return writeFile(p.opt.OutputFile, r)
}

func writeFile(path string, r Report) (err error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("profiler: flops_profiler.output_file %s: %w", path, err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profiler: flops_profiler.output_file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("profiler: flops_profiler.output_file: %w", cerr)
		}
	}()
	if err := Write(f, r); err != nil {
		return fmt.Errorf("profiler: flops_profiler.output_file %s: %w", path, err)
	}
	return nil
}

func (p *Profiler) syncDevice(what string) error {
	if p.sync == nil {
		return nil
	}
	if err := p.sync(); err != nil {
		return fmt.Errorf("profiler: synchronizing the device to time %s: %w", what, err)
	}
	return nil
}

// unitBegan and unitEnded time unit u's forward while a profile runs.
func (p *Profiler) unitBegan(u int) error {
	if !p.started || u < 0 || u >= len(p.unitModule) || p.unitModule[u] < 0 {
		return nil
	}
	if err := p.syncDevice(fmt.Sprintf("unit %d", u)); err != nil {
		return err
	}
	p.unitStart[u] = p.now()
	return nil
}

func (p *Profiler) unitEnded(u int) error {
	if !p.started || u < 0 || u >= len(p.unitModule) || p.unitModule[u] < 0 {
		return nil
	}
	if err := p.syncDevice(fmt.Sprintf("unit %d", u)); err != nil {
		return err
	}
	p.latency[p.unitModule[u]] += p.now().Sub(p.unitStart[u]).Seconds()
	return nil
}

// timedHooks is Profiler.Hooks' wrapper.
type timedHooks struct {
	p    *Profiler
	next model.UnitHooks
}

var _ model.UnitHooks = (*timedHooks)(nil)

func (h *timedHooks) BeforeForward(u int) error {
	if h.next != nil {
		if err := h.next.BeforeForward(u); err != nil {
			return err
		}
	}
	return h.p.unitBegan(u)
}

func (h *timedHooks) AfterForward(u int) error {
	if h.next != nil {
		if err := h.next.AfterForward(u); err != nil {
			return err
		}
	}
	return h.p.unitEnded(u)
}

func (h *timedHooks) BeforeBackward(u int) error {
	if h.next == nil {
		return nil
	}
	return h.next.BeforeBackward(u)
}

func (h *timedHooks) AfterBackward(u int) error {
	if h.next == nil {
		return nil
	}
	return h.next.AfterBackward(u)
}
