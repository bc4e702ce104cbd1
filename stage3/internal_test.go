package stage3

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// threeUnits is a layout of three units: a, b (whose 3×5 weight is odd
// to split) and c, which borrows a as a tied head does.
func threeUnits() model.Layout { return threeUnitsOf([]int{4, 4}, []int{3, 5}, []int{7}) }

// threeUnitsOf is threeUnits with the weights of a, b and c shaped so.
func threeUnitsOf(a, b, c []int) model.Layout {
	var lb model.LayoutBuilder
	normal := model.Init{Kind: model.InitNormal, Scale: 1}
	lb.Unit("a")
	lb.Param("a.w", normal, a...)
	lb.Param("a.b", normal, 3)
	lb.Unit("b")
	lb.Param("b.w", normal, b...)
	lb.Unit("c", 0)
	lb.Param("c.w", normal, c...)
	return lb.Build()
}

func options(l *model.Layout, acct *mem.Accountant, c comm.Comm) zcore.Options {
	return zcore.Options{Comm: c, Acct: acct, Layout: l,
		InitRange: func(dst []float32, lo int) error { l.InitRange(7, dst, lo); return nil },
		NewOptimizer: func(n int) (optim.Optimizer, error) {
			return optim.NewSGD(optim.SGDConfig{LR: 0.1}, n, optim.Alloc{Acct: acct, Tier: mem.Device}, nil)
		}}
}

const (
	bf = model.HookBeforeForward
	af = model.HookAfterForward
	bb = model.HookBeforeBackward
	ab = model.HookAfterBackward
)

type call struct {
	k model.HookKind
	u int
}

// pass is a model's forward and backward over threeUnits, reading the
// parameters the hooks gathered (checked against want) and adding
// gradients of 1.
func pass(s *Strategy, calls []call, want []float32) error {
	return passWriting(s, calls, want, func(_ int, g []float32) {
		for i := range g {
			g[i]++
		}
	})
}

// passWriting is pass with write producing the gradients of unit u, in
// each backward that reaches it.
func passWriting(s *Strategy, calls []call, want []float32, write func(u int, g []float32)) error {
	params, grads := s.ModelBuffers()
	for _, c := range calls {
		if err := model.CallHook(s, c.k, s.l, c.u); err != nil {
			return err
		}
		if c.k != bf && c.k != bb {
			continue
		}
		for _, u := range append([]int{c.u}, s.l.Units[c.u].Borrows...) {
			un := s.l.Units[u]
			for i := un.Offset; i < un.Offset+un.Numel; i++ {
				if params[i] != want[i] {
					return fmt.Errorf("unit %q element %d is %v, want %v", un.Name, i, params[i], want[i])
				}
			}
			if c.k == bb {
				write(u, grads[un.Offset:un.Offset+un.Numel])
			}
		}
	}
	return nil
}

var normal = []call{{bf, 0}, {af, 0}, {bf, 1}, {af, 1}, {bf, 2}, {af, 2}, {bb, 2}, {ab, 2}, {bb, 1}, {ab, 1}, {bb, 0}, {ab, 0}}

// departing gathers unit b twice in forward.
var departing = []call{{bf, 0}, {af, 0}, {bf, 1}, {af, 1}, {bf, 1}, {af, 1}, {bf, 2}, {af, 2}, {bb, 2}, {ab, 2}, {bb, 1}, {ab, 1}, {bb, 0}, {ab, 0}}

// TestTraceDeparture: on 2 ranks with prefetch, a pass whose units depart
// from the trace warns once, naming the step and the unit, and still
// computes with the right parameters; the pass after it records a new
// trace and follows it without warnings.
func TestTraceDeparture(t *testing.T) {
	l := threeUnits()
	want := make([]float32, l.Numel)
	l.InitRange(7, want, 0)
	var warns []string
	err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		cfg := Config{PrefetchBucketSize: 100, MaxLiveParameters: 1000}
		if c.Rank() == 0 {
			cfg.Warn = func(w string) { warns = append(warns, w) }
		}
		s, err := New(options(&l, mem.NewAccountant(c.Rank()), c), cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		for step, calls := range [][]call{normal, normal, departing, departing, departing} {
			if err := pass(s, calls, want); err != nil {
				return fmt.Errorf("pass %d: %w", step+1, err)
			}
			if c.Rank() == 0 && step == 1 && !s.f.complete {
				return errors.New("no trace after two passes")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "step 1") || !strings.Contains(warns[0], `unit "b"`) {
		t.Errorf("warnings %q, want one naming step 1 and unit \"b\"", warns)
	}
}

// TestPartitionedInit: initialization writes only the rank's partitions:
// the peak of every category is what stays live (no whole-model
// temporary), and the gathered master equals the whole model drawn at
// once.
func TestPartitionedInit(t *testing.T) {
	l := threeUnits()
	want := make([]float32, l.Numel)
	l.InitRange(7, want, 0)
	for world := 1; world <= 4; world++ {
		err := inproc.New(world, inproc.Options{}).Run(func(c comm.Comm) error {
			acct := mem.NewAccountant(c.Rank())
			s, err := New(options(&l, acct, c), Config{})
			if err != nil {
				return err
			}
			defer s.Close()
			snap := acct.Snapshot()
			if snap.PeakTotal[mem.Device] != snap.LiveTotal[mem.Device] || snap.PeakBytes(mem.Device, mem.Temp) != 0 {
				return fmt.Errorf("initialization peaked at %d bytes with %d live (temp %d)", snap.PeakTotal[mem.Device], snap.LiveTotal[mem.Device], snap.PeakBytes(mem.Device, mem.Temp))
			}
			got := make([]float32, l.Numel)
			if err := s.GatherMaster(got); err != nil {
				return err
			}
			for i := range got {
				if got[i] != want[i] {
					return fmt.Errorf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("world %d: %v", world, err)
		}
	}
}

// TestGatherOOM: a device budget too small for a unit's gathered
// parameters fails the hook like a GPU OOM, naming the unit.
func TestGatherOOM(t *testing.T) {
	l := threeUnits()
	acct := mem.NewAccountant(0)
	s, err := New(options(&l, acct, nil), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acct.SetCapacity(mem.Device, acct.Snapshot().LiveTotal[mem.Device]+4*10)
	err = s.BeforeForward(0)
	var oom *mem.OOMError
	if !errors.As(err, &oom) || !strings.Contains(err.Error(), `unit "a"`) {
		t.Errorf("got %v, want an OOM naming unit \"a\"", err)
	}
}
