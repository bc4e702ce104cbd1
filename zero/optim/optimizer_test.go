package optim

import (
	"testing"

	"github.com/dszero/dszero/mem"
	"github.com/google/go-cmp/cmp"
)

func TestSplitCoversRangeAligned(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 1000, 4096, 100003} {
		for _, parts := range []int{1, 2, 3, 7, 16} {
			next := 0
			for i := 0; i < parts; i++ {
				lo, hi := Split(n, parts, i)
				if lo != next || hi < lo {
					t.Fatalf("Split(%d,%d,%d) = [%d,%d), want start %d", n, parts, i, lo, hi, next)
				}
				if lo%chunkAlign != 0 && lo != n {
					t.Fatalf("Split(%d,%d,%d) starts at %d, not 16-aligned", n, parts, i, lo)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("Split(%d,%d) covers %d", n, parts, next)
			}
		}
	}
}

// A pool run gives the same bits as a serial run, whatever the workers.
func TestPoolRunIsDeterministic(t *testing.T) {
	const n = 50000
	run := func(pool *Pool) []float32 {
		o, err := NewAdam(DefaultAdamConfig(TorchAdamW), n, testAlloc(), pool)
		if err != nil {
			t.Fatal(err)
		}
		p, g := make([]float32, n), make([]float32, n)
		for i := range p {
			p[i], g[i] = float32(i%97)*0.01, float32(i%89)*1e-3-0.04
		}
		for s := 0; s < 3; s++ {
			o.Step(p, g)
		}
		return p
	}
	want := run(nil)
	for _, w := range []int{2, 3, 5} {
		pool := NewPool(w)
		if d := firstDiff(run(pool), want); d >= 0 {
			t.Errorf("%d workers differ at %d", w, d)
		}
		pool.Close()
	}
}

func TestStepAllocatesNothing(t *testing.T) {
	const n = 1 << 14
	pool := NewPool(2)
	defer pool.Close()
	p, g := make([]float32, n), make([]float32, n)
	var opts []Optimizer
	add := func(o Optimizer, err error) {
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, o)
	}
	for _, f := range []AdamFlavor{TorchAdam, TorchAdamW, DeepSpeedAdam} {
		add(NewAdam(DefaultAdamConfig(f), n, testAlloc(), pool))
	}
	add(NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9}, n, testAlloc(), pool))
	add(NewAdagrad(DefaultAdagradConfig(TorchAdagrad), n, testAlloc(), pool))
	add(NewLamb(DefaultLambConfig(), n, []Segment{{0, 0, n}}, nil, testAlloc(), pool))
	for _, o := range opts {
		o.Step(p, g)
		if allocs := testing.AllocsPerRun(10, func() { o.Step(p, g) }); allocs != 0 {
			t.Errorf("%s: %v allocations per step", o.Name(), allocs)
		}
	}
	if allocs := testing.AllocsPerRun(10, func() { pool.Scale(p, 0.5) }); allocs != 0 {
		t.Errorf("Scale: %v allocations", allocs)
	}
}

// State is allocated per partition through the accountant, as optim_state.
func TestStateIsAccounted(t *testing.T) {
	acct := mem.NewAccountant(1)
	a := Alloc{Acct: acct, Tier: mem.PinnedHost}
	o, err := NewAdam(DefaultAdamConfig(TorchAdamW), 1000, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := acct.Snapshot().LiveBytes(mem.PinnedHost, mem.OptimState); got != 2*1000*4 {
		t.Errorf("Adam state = %d bytes, want 8000", got)
	}
	o.Free()
	if got := acct.Snapshot().LiveBytes(mem.PinnedHost, mem.OptimState); got != 0 {
		t.Errorf("after Free: %d bytes", got)
	}
	acct.SetCapacity(mem.Device, 4000)
	if _, err := NewAdam(DefaultAdamConfig(TorchAdamW), 1000, Alloc{Acct: acct, Tier: mem.Device}, nil); err == nil {
		t.Error("Adam state over the device budget was allocated")
	}
	if got := acct.Snapshot().LiveBytes(mem.Device, mem.OptimState); got != 0 {
		t.Errorf("failed construction left %d bytes accounted", got)
	}
}

// Exporting the state mid-run and importing it into a fresh optimizer
// continues bit for bit (the resume the reference harness checks).
func TestStateRoundTripResumesExactly(t *testing.T) {
	const n = 777
	p0, grads := lambInputs(n, 8)
	for _, mk := range []func() Optimizer{
		func() Optimizer { o, _ := NewAdam(DefaultAdamConfig(TorchAdamW), n, testAlloc(), nil); return o },
		func() Optimizer { o, _ := NewAdam(DefaultAdamConfig(TorchAdam), n, testAlloc(), nil); return o },
		func() Optimizer {
			o, _ := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.1}, n, testAlloc(), nil)
			return o
		},
		func() Optimizer {
			o, _ := NewAdagrad(DefaultAdagradConfig(TorchAdagrad), n, testAlloc(), nil)
			return o
		},
		func() Optimizer {
			o, _ := NewLamb(DefaultLambConfig(), n, []Segment{{0, 0, n}}, nil, testAlloc(), nil)
			return o
		},
	} {
		straight := mk()
		p := clone(p0)
		for _, g := range grads {
			straight.Step(p, g)
		}
		first := mk()
		q := clone(p0)
		for _, g := range grads[:5] {
			first.Step(q, g)
		}
		second := mk()
		second.SetStepCount(first.StepCount())
		for _, name := range first.StateNames() {
			if err := second.LoadState(name, first.State(name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range grads[5:] {
			second.Step(q, g)
		}
		if d := firstDiff(p, q); d >= 0 {
			t.Errorf("%s: resumed run differs at %d: %v vs %v", straight.Name(), d, q[d], p[d])
		}
	}
}

// DeepSpeed's C++ Adam recomputes beta^t with pow() after a resume instead
// of continuing its float32 running product, so a resumed run may differ
// from an uninterrupted one in the last bits; both stay within an ulp-level
// distance and the running product matches the float32 product.
func TestDeepSpeedAdamBetaPowers(t *testing.T) {
	o, _ := NewAdam(DefaultAdamConfig(DeepSpeedAdam), 4, testAlloc(), nil)
	p := []float32{1, 2, 3, 4}
	prod1, prod2 := float32(1), float32(1)
	for s := 0; s < 50; s++ {
		o.Step(p, []float32{0.1, -0.2, 0.3, 0})
		prod1, prod2 = prod1*float32(0.9), prod2*float32(0.999)
	}
	if o.dsB1t != prod1 || o.dsB2t != prod2 {
		t.Errorf("running products %v %v, want %v %v", o.dsB1t, o.dsB2t, prod1, prod2)
	}
	o.SetStepCount(50)
	o.Step(p, []float32{0.1, -0.2, 0.3, 0})
	if want := float32(powInt(float64(float32(0.9)), 51)); o.dsB1t != want {
		t.Errorf("after a resume beta1^t = %v, want pow() %v", o.dsB1t, want)
	}
}

func TestParamGroupsHaveReferenceKeys(t *testing.T) {
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		return sortStrings(k)
	}
	adamw, _ := NewAdam(DefaultAdamConfig(TorchAdamW), 1, testAlloc(), nil)
	// The README of the 0.14.5 reference lists the torch AdamW param_group keys.
	want := sortStrings([]string{"lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable"})
	if d := cmp.Diff(want, keys(adamw.ParamGroup())); d != "" {
		t.Errorf("AdamW param group keys (-want +got):\n%s", d)
	}
	fused, _ := NewAdam(DefaultAdamConfig(DeepSpeedAdam), 1, testAlloc(), nil)
	if pg := fused.ParamGroup(); pg["bias_correction"] != true || pg["step"] != 0 {
		t.Errorf("FusedAdam param group %v lacks bias_correction/step", pg)
	}
	if adamw.StepIsTensor() == fused.StepIsTensor() {
		t.Error("torch stores step as a tensor, DeepSpeed as an int")
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}
