package profiler_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/profiler"
)

// tickClock advances one millisecond at every reading, so each measured
// interval is the number of readings it spans.
type tickClock struct {
	t     time.Time
	reads int
}

func (c *tickClock) now() time.Time {
	c.reads++
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// recorder is the next UnitHooks in the chain (a ZeRO stage); it logs
// every call and fails the one named in failAt.
type recorder struct {
	log    []string
	failAt string
}

var errInjected = errors.New("injected")

func (r *recorder) call(kind string, u int) error {
	s := fmt.Sprintf("%s(%d)", kind, u)
	r.log = append(r.log, s)
	if s == r.failAt {
		return errInjected
	}
	return nil
}
func (r *recorder) BeforeForward(u int) error  { return r.call("BF", u) }
func (r *recorder) AfterForward(u int) error   { return r.call("AF", u) }
func (r *recorder) BeforeBackward(u int) error { return r.call("BB", u) }
func (r *recorder) AfterBackward(u int) error  { return r.call("AB", u) }

func TestOptionsValidate(t *testing.T) {
	if err := profiler.DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := profiler.Options{ProfileStep: -1, ModuleDepth: -2, TopModules: -1, RecomputeFwdFactor: -0.5}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, key := range []string{"flops_profiler.profile_step = -1", "flops_profiler.module_depth = -2",
		"flops_profiler.top_modules = -1", "flops_profiler.recompute_fwd_factor = -0.5"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %q", err, key)
		}
	}
	if _, err := profiler.New(mlp.Config{Sizes: []int{2, 3}}, bad, time.Now, nil); err == nil {
		t.Error("New accepted bad options")
	}
}

// TestProfilerTimesUnitsOfARealModel runs a real GPT forward with the
// profiler's hooks around a ZeRO-like recorder: the blocks' latencies
// come from their units, the root's from Start to Stop, the embeddings
// and head (not modules of their own) stay untimed, the recorder sees
// every call, and the backward is not timed.
func TestProfilerTimesUnitsOfARealModel(t *testing.T) {
	cfg, err := gpt.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	clk := &tickClock{t: time.Unix(0, 0)}
	p, err := profiler.New(cfg, profiler.DefaultOptions(), clk.now, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m, err := gpt.New(cfg, gpt.Options{Gemm: gemm, Acct: mem.NewAccountant(0), Hooks: p.Hooks(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l := cfg.Layout()
	params, grads := make([]float32, l.Numel), make([]float32, l.Numel)
	l.InitRange(1, params, 0)
	if err := m.Bind(params, grads); err != nil {
		t.Fatal(err)
	}
	B, T := 2, 8
	tokens, targets := make([]int32, B*T), make([]int32, B*T)
	for i := range tokens {
		tokens[i], targets[i] = int32(i%cfg.Vocab), int32((i+1)%cfg.Vocab)
	}

	// A forward before the profile starts is not timed.
	if _, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	if clk.reads != 0 {
		t.Fatalf("the clock was read %d times outside a profile", clk.reads)
	}
	if _, err := p.Report(1, nil); err == nil {
		t.Error("Report before any profile did not fail")
	}

	rec.log = nil
	if err := p.Start(model.FlopShape{Batch: B, Seq: T}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	reads := clk.reads
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	if clk.reads != reads {
		t.Errorf("the backward read the clock %d times", clk.reads-reads)
	}
	wantLog := []string{"BF(0)", "AF(0)", "BF(1)", "AF(1)", "BF(2)", "AF(2)", "BF(3)", "AF(3)",
		"BB(3)", "AB(3)", "BB(2)", "AB(2)", "BB(1)", "AB(1)", "BB(0)", "AB(0)"}
	if d := cmp.Diff(wantLog, rec.log); d != "" {
		t.Errorf("calls through to the next hooks (-want +got):\n%s", d)
	}

	r, err := p.Report(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Readings: Start 1, block 0 at 2 and 3, block 1 at 4 and 5, Stop 6.
	got := map[string]float64{}
	for i, name := range paths(r.Modules) {
		if r.Latency[i] != 0 {
			got[name] = r.Latency[i]
		}
	}
	want := map[string]float64{"": 0.005, "blocks.0": 0.001, "blocks.1": 0.001}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("measured latencies in seconds (-want +got):\n%s", d)
	}

	// A second profile starts from zero.
	if err := p.Start(model.FlopShape{Batch: B, Seq: T}); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(model.FlopShape{Batch: B, Seq: T}); err == nil {
		t.Error("a second Start while running did not fail")
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	r, _ = p.Report(2, nil)
	for i, name := range paths(r.Modules) {
		if name != "" && r.Latency[i] != 0 {
			t.Errorf("%s kept latency %g from the previous profile", name, r.Latency[i])
		}
	}
	if err := p.Stop(); err == nil {
		t.Error("Stop without Start did not fail")
	}
}

// TestHookErrors: an error of the next hooks stops the pass unchanged,
// and a failing device synchronization is reported with the unit.
func TestHookErrors(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{4, 3, 2}}
	clk := &tickClock{}
	syncErr := errors.New("device lost")
	var failSync bool
	sync := func() error {
		if failSync {
			return syncErr
		}
		return nil
	}
	p, err := profiler.New(cfg, profiler.DefaultOptions(), clk.now, sync)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{failAt: "AF(1)"}
	h := p.Hooks(rec)
	if err := p.Start(model.FlopShape{Batch: 2, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.BeforeForward(0); err != nil {
		t.Fatal(err)
	}
	if err := h.AfterForward(0); err != nil {
		t.Fatal(err)
	}
	if err := h.BeforeForward(1); err != nil {
		t.Fatal(err)
	}
	if err := h.AfterForward(1); !errors.Is(err, errInjected) {
		t.Errorf("AfterForward(1) = %v, want the next hook's error", err)
	}
	failSync = true
	err = h.BeforeForward(0)
	if !errors.Is(err, syncErr) || !strings.Contains(err.Error(), "unit 0") {
		t.Errorf("BeforeForward with a failing sync = %v", err)
	}
	if err := p.Stop(); !errors.Is(err, syncErr) {
		t.Errorf("Stop with a failing sync = %v", err)
	}
	if err := p.Hooks(nil).BeforeBackward(0); err != nil {
		t.Error(err)
	}
	if err := p.Start(model.FlopShape{Batch: 0, Seq: 1}); err == nil {
		t.Error("Start with B = 0 did not fail")
	}
}

// TestPrintOutputFile: output_file gets the report (directories made),
// rewritten at each print as DeepSpeed opens it with "w"; without one
// the report goes to stdout.
func TestPrintOutputFile(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{16, 64, 8}}
	clk := &tickClock{}
	opt := profiler.DefaultOptions()
	opt.OutputFile = filepath.Join(t.TempDir(), "a", "b", "flops.txt")
	p, err := profiler.New(cfg, opt, clk.now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(model.FlopShape{Batch: 4, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	e := &profiler.Engine{WorldSize: 2, DataParallel: 2, ModelParallel: 1, MicroBatch: 4, Fwd: 0.002, Bwd: 0.004, Step: 0.001}
	var stdout bytes.Buffer
	for range 2 {
		if err := p.Print(&stdout, 2, e); err != nil {
			t.Fatal(err)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("with an output_file %d bytes went to stdout", stdout.Len())
	}
	got, err := os.ReadFile(opt.OutputFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Report(2, e)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := profiler.Write(&want, r); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want.String(), string(got)); d != "" {
		t.Errorf("output file (-want +got):\n%s", d)
	}
	if !strings.Contains(string(got), "Profile Summary at step 2:") || strings.Count(string(got), "DeepSpeed Flops Profiler") != 1 {
		t.Errorf("output file holds not exactly one report:\n%s", got)
	}

	// An output_file under a regular file cannot be created.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	opt.OutputFile = filepath.Join(blocker, "flops.txt")
	p2, _ := profiler.New(cfg, opt, clk.now, nil)
	_ = p2.Start(model.FlopShape{Batch: 4, Seq: 1})
	_ = p2.Stop()
	if err := p2.Print(&stdout, 2, e); err == nil || !strings.Contains(err.Error(), "flops_profiler.output_file") {
		t.Errorf("unwritable output_file: %v", err)
	}
}

// TestWriteRejectsBadModules: a module list that is not a tree, or names
// a parameter the layout lacks, is an error, not a wrong report.
func TestWriteRejectsBadModules(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{2, 3}}
	l := cfg.Layout()
	good := cfg.FlopModules(model.FlopShape{Batch: 1, Seq: 1})
	for name, mods := range map[string][]model.FlopModule{
		"empty":         nil,
		"two roots":     append(append([]model.FlopModule(nil), good...), model.FlopModule{Depth: 0, Name: "x"}),
		"depth jump":    append(append([]model.FlopModule(nil), good...), model.FlopModule{Depth: 3, Name: "x"}),
		"unknown param": append(append([]model.FlopModule(nil), good...), model.FlopModule{Depth: 1, Name: "x", Params: []string{"nope"}}),
	} {
		if err := profiler.Write(&bytes.Buffer{}, profiler.Report{Modules: mods, Layout: &l}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := profiler.Write(&bytes.Buffer{}, profiler.Report{Modules: good, Layout: &l, Latency: []float64{1}}); err == nil {
		t.Error("latencies for the wrong number of modules accepted")
	}
}
