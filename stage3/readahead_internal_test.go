package stage3

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/dszero/dszero/zero/optim"
	"github.com/google/go-cmp/cmp"
)

// chain is a layout of n units, each a rows×cols weight (odd sizes split
// with padding) and a bias of rows.
func chain(n, rows, cols int) model.Layout {
	var b model.LayoutBuilder
	for u := range n {
		b.Unit(fmt.Sprintf("u%d", u))
		b.Param(fmt.Sprintf("u%d.w", u), model.Init{Kind: model.InitNormal, Scale: 1}, rows, cols)
		b.Param(fmt.Sprintf("u%d.b", u), model.Init{Kind: model.InitNormal, Scale: 1}, rows)
	}
	return b.Build()
}

// rig is one rank's stage 3 over a layout, trained by a model that
// checks every gathered element against the master and writes a gradient
// of each element that depends on its gathered value.
type rig struct {
	s       *Strategy
	l       *model.Layout
	acct    *mem.Accountant
	cur     []float32     // the master after the last step
	compute time.Duration // slept per unit hook: the model's compute
}

// swapSetup is how a rig keeps its parameter partitions.
type swapSetup struct {
	fsys    nvme.FS // nil: in memory (no offload_param nvme)
	buffers int     // offload_param.buffer_count
}

// newRig builds a rank's strategy with SGD with momentum and, with
// sw.fsys, the parameter partitions in swap files on it.
func newRig(l *model.Layout, c comm.Comm, cfg Config, sw swapSetup) (*rig, error) {
	rank := 0
	if c != nil {
		rank = c.Rank()
	}
	acct := mem.NewAccountant(rank)
	o := options(l, acct, c)
	o.NewOptimizer = func(n int) (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9}, n, optim.Alloc{Acct: acct, Tier: mem.Device}, nil)
	}
	if sw.fsys != nil {
		cfg.ParamSwap = func(largest, total int64) (*nvme.Swapper, error) {
			opts := nvme.DefaultOptions()
			opts.Path, opts.Rank, opts.Name = "/nvme", rank, "params"
			opts.Source = "zero_optimization.offload_param"
			opts.BufferCount, opts.BufferBytes = sw.buffers, largest
			opts.Preflight, opts.Category = total, mem.Params16
			return nvme.New(sw.fsys, acct, opts)
		}
	}
	s, err := New(o, cfg)
	if err != nil {
		return nil, err
	}
	r := &rig{s: s, l: l, acct: acct, cur: make([]float32, l.Numel)}
	l.InitRange(7, r.cur, 0)
	return r, nil
}

// pass runs one forward and backward over the units in order.
func (r *rig) pass() error {
	params, grads := r.s.ModelBuffers()
	for u := range r.l.Units {
		if err := model.CallHook(r.s, bf, r.l, u); err != nil {
			return err
		}
		time.Sleep(r.compute)
		if err := model.CallHook(r.s, af, r.l, u); err != nil {
			return err
		}
	}
	for u := len(r.l.Units) - 1; u >= 0; u-- {
		if err := model.CallHook(r.s, bb, r.l, u); err != nil {
			return err
		}
		un := r.l.Units[u]
		for i := un.Offset; i < un.Offset+un.Numel; i++ {
			if params[i] != r.cur[i] {
				return fmt.Errorf("unit %q element %d gathered as %v, want %v", un.Name, i, params[i], r.cur[i])
			}
			grads[i] += 0.5*params[i] + float32(i%5)/8
		}
		time.Sleep(r.compute)
		if err := model.CallHook(r.s, ab, r.l, u); err != nil {
			return err
		}
	}
	return nil
}

// step takes the optimizer step and gathers the new master.
func (r *rig) step() error {
	if _, err := r.s.Step(zcore.StepInput{LR: 0.1, LossScale: 1}); err != nil {
		return err
	}
	return r.s.GatherMaster(r.cur)
}

// chainRun is what rank 0 of a run saw.
type chainRun struct {
	masters [][]float32      // after each step
	waits   []Waits          // per pass
	peaks   map[string]int64 // "category/tier" → peak bytes
}

// trainChain trains lay on world ranks for steps steps of gas passes.
func trainChain(t *testing.T, lay model.Layout, world, steps, gas int, cfg Config, sw swapSetup) chainRun {
	t.Helper()
	var out chainRun
	err := inproc.New(world, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		r, err := newRig(&lay, c, cfg, sw)
		if err != nil {
			return err
		}
		defer r.s.Close()
		for st := range steps {
			for p := range gas {
				if err := r.pass(); err != nil {
					return fmt.Errorf("step %d pass %d: %w", st+1, p+1, err)
				}
				if w := r.s.TakeWaits(); c.Rank() == 0 {
					out.waits = append(out.waits, w)
				}
			}
			if err := r.step(); err != nil {
				return fmt.Errorf("step %d: %w", st+1, err)
			}
			if c.Rank() == 0 {
				out.masters = append(out.masters, slices.Clone(r.cur))
			}
		}
		if c.Rank() == 0 {
			snap := r.acct.Snapshot()
			out.peaks = map[string]int64{}
			for _, cat := range mem.Categories() {
				for _, tr := range []mem.Tier{mem.Device, mem.PinnedHost, mem.NVMe} {
					if b := snap.PeakBytes(tr, cat); b != 0 {
						out.peaks[cat.String()+"/"+tr.String()] = b
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func memFS(t testing.TB) *nvme.MemFS {
	m := nvme.NewMemFS(0)
	if err := m.Mkdir("/nvme"); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestParamReadAheadParity: with offload_param nvme, reading the
// partitions ahead along the trace trains bit-identically (the master
// after each of 3 steps of 2 passes, on 2 ranks) to keeping them in
// memory and to reading each when its gather is issued, whatever the
// buffers and the gathering knobs; it reads ahead only with a trace
// (never in the first pass) and room in the pool (buffer_count ≥ 2), and
// it takes no memory beyond the swap buffers: every category's peak in
// every tier is the on-demand run's.
func TestParamReadAheadParity(t *testing.T) {
	lay := chain(6, 5, 7) // partitions on 2 ranks: w 18, b 3
	unit := 5*7 + 5
	for _, tc := range []struct {
		name  string
		cfg   Config
		ahead bool // reads ahead after the first pass
	}{
		{"prefetch one unit", Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 20}, true},
		{"prefetch three units", Config{PrefetchBucketSize: 3 * unit, MaxLiveParameters: 1 << 20}, true},
		{"prefetch, live cap", Config{PrefetchBucketSize: 3 * unit, MaxLiveParameters: 2 * unit}, true},
		{"prefetch and reuse", Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 20, MaxReuseDistance: 2 * unit}, true},
		{"keep after forward", Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 20, KeepAfterForward: true}, true},
		{"reuse only (no prefetch window)", Config{MaxReuseDistance: 2 * unit}, false},
		{"on demand (no trace)", Config{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := trainChain(t, lay, 2, 3, 2, tc.cfg, swapSetup{})
			off := tc.cfg
			off.NoParamReadAhead = true
			demand := trainChain(t, lay, 2, 3, 2, off, swapSetup{fsys: memFS(t), buffers: 5})
			for _, v := range []struct {
				name  string
				cfg   Config
				bufs  int
				ahead bool
			}{
				{"read ahead, 5 buffers", tc.cfg, 5, tc.ahead},
				{"read ahead, 2 buffers", tc.cfg, 2, tc.ahead},
				{"1 buffer: no room to read ahead", tc.cfg, 1, false},
			} {
				got := trainChain(t, lay, 2, 3, 2, v.cfg, swapSetup{fsys: memFS(t), buffers: v.bufs})
				for _, want := range []struct {
					name string
					run  chainRun
				}{{"in memory", base}, {"read on demand", demand}} {
					if diff := cmp.Diff(want.run.masters, got.masters); diff != "" {
						t.Errorf("%s: the masters differ from %s's (-want +got):\n%s", v.name, want.name, diff)
					}
				}
				if v.bufs == 5 {
					if diff := cmp.Diff(demand.peaks, got.peaks); diff != "" {
						t.Errorf("%s: peak bytes differ from reading on demand (-on demand +read ahead):\n%s", v.name, diff)
					}
				}
				ahead := 0
				for p, w := range got.waits {
					if p == 0 && w.ReadsAhead != 0 {
						t.Errorf("%s: %d reads ahead in the first pass, which has no trace", v.name, w.ReadsAhead)
					}
					if w.Reads == 0 || w.ReadsAhead > w.Reads || w.ReadsReady > w.ReadsAhead {
						t.Errorf("%s: pass %d: %+v", v.name, p+1, w)
					}
					ahead += w.ReadsAhead
				}
				if (ahead > 0) != v.ahead {
					t.Errorf("%s: %d reads ahead over the run, want some: %v", v.name, ahead, v.ahead)
				}
				t.Logf("%s: waits per pass %+v", v.name, got.waits)
			}
			for _, w := range demand.waits {
				if w.ReadsAhead != 0 || w.ReadsUnused != 0 {
					t.Errorf("NoParamReadAhead: %+v", w)
				}
			}
		})
	}
}

// TestParamReadAheadEarly: with a slow disk (each read of a partition
// sleeps 3ms) and a model that computes 10ms per unit hook, the reads of
// the next units start while the current one computes: after the first
// pass every gather takes its partitions from a read started ahead, and
// most of those reads have landed when the gather comes; the compute
// thread waits far less on reads than when each is read at its gather.
func TestParamReadAheadEarly(t *testing.T) {
	lay := chain(4, 5, 7)
	unit := 5*7 + 5
	runs := map[bool]chainRun{}
	for _, ahead := range []bool{false, true} {
		cfg := Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 20, NoParamReadAhead: !ahead}
		fsys := nvme.NewFaultFS(memFS(t), nvme.Fault{Ops: nvme.OpRead, Path: "/params/param", Delay: 3 * time.Millisecond})
		var run chainRun
		err := inproc.New(1, inproc.Options{}).Run(func(c comm.Comm) error {
			r, err := newRig(&lay, c, cfg, swapSetup{fsys: fsys, buffers: 5})
			if err != nil {
				return err
			}
			defer r.s.Close()
			r.compute = 10 * time.Millisecond
			for st := range 3 {
				if err := r.pass(); err != nil {
					return fmt.Errorf("step %d: %w", st+1, err)
				}
				run.waits = append(run.waits, r.s.TakeWaits())
				if err := r.step(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		runs[ahead] = run
		t.Logf("read ahead %v: %+v", ahead, run.waits)
	}
	// The trace is u0 u1 u2 u3 u3 u2 u1 u0; u3 stays gathered from its
	// forward to its backward (reused at distance 0), every other unit is
	// gathered twice: 7 gathers × 2 parameters = 14 reads after the first
	// pass (which records the trace: 16). All are read ahead but u2's
	// second: it is gathered while the walk passes it, and released just
	// before its backward gather.
	for p, w := range runs[true].waits {
		if want := min(p, 1)*14 + (1-min(p, 1))*16; w.Reads != want {
			t.Errorf("pass %d: %d reads, want %d", p+1, w.Reads, want)
		}
		switch {
		case p == 0 && w.ReadsAhead != 0:
			t.Errorf("pass 1 (no trace yet): %d reads ahead, want 0", w.ReadsAhead)
		case p > 0 && w.ReadsAhead < w.Reads-2:
			// Only the last unit's backward gather comes right after
			// its forward one: nothing to read it ahead of.
			t.Errorf("pass %d: %d of %d reads started ahead, want all but the last unit's 2", p+1, w.ReadsAhead, w.Reads)
		case p > 0 && 2*w.ReadsReady < w.ReadsAhead:
			t.Errorf("pass %d: %d of %d reads ahead had landed at their gather, want most", p+1, w.ReadsReady, w.ReadsAhead)
		case w.ReadsUnused != 0:
			t.Errorf("pass %d: %d reads ahead unused", p+1, w.ReadsUnused)
		}
	}
	for p, w := range runs[false].waits {
		if w.ReadsAhead != 0 {
			t.Errorf("without read-ahead, pass %d: %+v", p+1, w)
		}
	}
	last := len(runs[true].waits) - 1
	if on, off := runs[true].waits[last].Read, runs[false].waits[last].Read; 2*on > off {
		t.Errorf("the last pass waited %v on reads with read-ahead, %v without: want less than half", on, off)
	}
}

// TestParamReadAheadError: a read ahead that fails (EIO on u1.b's file,
// injected before the step whose end starts reading the next pass's
// first units) fails the gather that needs it — the prefetch of unit u1
// in u0's BeforeForward — naming the parameter, the read ahead and the
// file, with the cause; Close then waits for every read still ahead and
// hands every byte back.
func TestParamReadAheadError(t *testing.T) {
	lay := chain(4, 5, 7)
	unit := 5*7 + 5
	fsys := nvme.NewFaultFS(memFS(t))
	r, err := newRig(&lay, nil, Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 20}, swapSetup{fsys: fsys, buffers: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pass(); err != nil {
		t.Fatal(err)
	}
	fsys.Inject(nvme.Fault{Ops: nvme.OpRead, Path: "param3.swp", Err: syscall.EIO, Times: 1})
	if err := r.step(); err != nil {
		t.Fatal(err)
	}
	err = r.s.BeforeForward(0)
	if fsys.Hits(0) != 1 {
		t.Errorf("param3's file was read %d times with the fault, want once (ahead)", fsys.Hits(0))
	}
	t.Logf("gather: %v", err)
	var ioe *nvme.IOError
	if !errors.Is(err, syscall.EIO) || !errors.As(err, &ioe) || !strings.Contains(err.Error(), "/nvme/dszero_rank0/params/param3.swp") ||
		!strings.Contains(err.Error(), "u1.b (read ahead of its gather)") {
		t.Errorf("BeforeForward(0) = %v, want EIO naming u1.b, the read ahead and its file", err)
	}
	if w := r.s.TakeWaits(); w.ReadsAhead != 4 {
		t.Errorf("%d reads ahead taken, want u0's and u1's 4: %+v", w.ReadsAhead, w)
	}
	r.s.Close()
	snap := r.acct.Snapshot()
	for _, tr := range []mem.Tier{mem.Device, mem.PinnedHost, mem.NVMe} {
		if snap.LiveTotal[tr] != 0 {
			t.Errorf("after Close: %d bytes live in %s", snap.LiveTotal[tr], tr)
		}
	}
}

// TestParamReadAheadDeparture: a pass that departs from the trace drops
// the reads ahead (their buffers come back at once) and fetches on
// demand with the right values; the passes after it record a new trace
// and read ahead along it. No read ahead outlives its pass.
func TestParamReadAheadDeparture(t *testing.T) {
	l := threeUnits()
	want := make([]float32, l.Numel)
	l.InitRange(7, want, 0)
	var warns []string
	waits := make([]Waits, 5)
	err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		cfg := Config{PrefetchBucketSize: 20, MaxLiveParameters: 1000}
		if c.Rank() == 0 {
			cfg.Warn = func(w string) { warns = append(warns, w) }
		}
		r, err := newRig(&l, c, cfg, swapSetup{fsys: memFS(t), buffers: 3})
		if err != nil {
			return err
		}
		defer r.s.Close()
		for p, calls := range [][]call{normal, normal, departing, departing, departing} {
			if err := pass(r.s, calls, want); err != nil {
				return fmt.Errorf("pass %d: %w", p+1, err)
			}
			if held := r.s.params.(*offload.SwappedParams).Held(); held != 0 {
				return fmt.Errorf("pass %d: %d reads ahead held after the pass", p+1, held)
			}
			if w := r.s.TakeWaits(); c.Rank() == 0 {
				waits[p] = w
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("waits per pass: %+v", waits)
	if len(warns) != 1 {
		t.Errorf("warnings %q, want one", warns)
	}
	if waits[0].ReadsAhead != 0 || waits[1].ReadsAhead == 0 || waits[4].ReadsAhead == 0 {
		t.Errorf("reads ahead per pass %d %d %d %d %d: want none without a trace, some along one",
			waits[0].ReadsAhead, waits[1].ReadsAhead, waits[2].ReadsAhead, waits[3].ReadsAhead, waits[4].ReadsAhead)
	}
}
