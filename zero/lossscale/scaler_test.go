package lossscale

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// model is update_scale transcribed from deepspeed/runtime/fp16/loss_scaler.py
// (v0.19.5 and, with legacy, v0.14.5) as a plain step function.
type model struct {
	scale, min                 float64
	window, shift, hyst        int
	consecutive, raise, legacy bool
	iter, last                 int
	failed                     bool
}

func (m *model) step(overflow bool) {
	if overflow {
		if m.shift == 1 || m.hyst == 1 {
			if m.scale == m.min && m.raise {
				m.failed = true
				return
			}
			m.scale = math.Max(m.scale/2, m.min)
		} else {
			m.hyst--
		}
		m.last = m.iter
	} else {
		if m.consecutive {
			m.hyst = m.shift
		}
		grow := false
		if m.legacy {
			grow = (m.iter-m.last)%m.window == 0
		} else {
			s := m.iter - m.last - 1
			grow = s > 0 && s%m.window == 0
		}
		if grow {
			if !m.consecutive {
				m.hyst = m.shift
			}
			m.scale *= 2
		}
	}
	m.iter++
}

func patterns() map[string][]bool {
	r := rand.New(rand.NewPCG(7, 11))
	out := map[string][]bool{}
	for _, p := range []float64{0.05, 0.3, 0.6, 0.95} {
		seq := make([]bool, 3000)
		for i := range seq {
			seq[i] = r.Float64() < p
		}
		out[fmt.Sprintf("random p=%.2f", p)] = seq
	}
	// Bursts: long clean runs, then 1..5 overflows in a row.
	var burst []bool
	for b := 1; len(burst) < 4000; b = b%5 + 1 {
		for i := 0; i < 37; i++ {
			burst = append(burst, false)
		}
		for i := 0; i < b; i++ {
			burst = append(burst, true)
		}
	}
	out["bursts"] = burst
	// Alternating, and a long overflow run that reaches the minimum.
	alt := make([]bool, 500)
	for i := range alt {
		alt[i] = i%2 == 0
	}
	out["alternating"] = alt
	long := make([]bool, 60)
	for i := range long {
		long[i] = i < 40
	}
	out["to the floor"] = long
	return out
}

func TestDynamicMatchesModel(t *testing.T) {
	for name, seq := range patterns() {
		for _, shift := range []int{1, 2, 3} {
			for _, consecutive := range []bool{false, true} {
				for _, window := range []int{1, 2, 5, 1000} {
					for _, raise := range []bool{false, true} {
						for _, rule := range []GrowthRule{StableInterval, Legacy} {
							c := Config{InitScale: 1 << 16, ScaleWindow: window, MinScale: 1, DelayedShift: shift,
								ConsecutiveHysteresis: consecutive, RaiseErrorAtMinScale: raise, ScaleFactor: 2, Growth: rule}
							d, err := NewDynamic(c)
							if err != nil {
								t.Fatal(err)
							}
							m := &model{scale: 1 << 16, min: 1, window: window, shift: shift, hyst: shift,
								consecutive: consecutive, raise: raise, legacy: rule == Legacy, last: -1}
							for i, o := range seq {
								m.step(o)
								err := d.Update(o)
								if m.failed {
									if !errors.Is(err, ErrMinScale) {
										t.Fatalf("%s shift %d cons %v window %d: step %d should fail at the minimum, got %v", name, shift, consecutive, window, i, err)
									}
									break
								}
								want := State{CurScale: m.scale, CurIter: m.iter, LastOverflowIter: m.last, CurHysteresis: m.hyst}
								if got := d.State(); got != want || err != nil {
									t.Fatalf("%s shift %d cons %v window %d raise %v rule %d step %d: %+v (err %v), model %+v",
										name, shift, consecutive, window, raise, rule, i, got, err, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// Sequences worked out by hand from update_scale.
func TestDynamicByHand(t *testing.T) {
	run := func(c Config, seq string) ([]float64, []int, error) {
		d, err := NewDynamic(c)
		if err != nil {
			t.Fatal(err)
		}
		var scales []float64
		var hyst []int
		for _, ch := range seq {
			if err := d.Update(ch == 'X'); err != nil {
				return scales, hyst, err
			}
			scales = append(scales, d.Scale())
			hyst = append(hyst, d.State().CurHysteresis)
		}
		return scales, hyst, nil
	}
	base := Config{InitScale: 16, ScaleWindow: 2, MinScale: 1, DelayedShift: 2, RaiseErrorAtMinScale: true, ScaleFactor: 2}
	legacy := base
	legacy.Growth = Legacy
	cons := base
	cons.ConsecutiveHysteresis = true
	cons.ScaleWindow = 1000
	noCons := cons
	noCons.ConsecutiveHysteresis = false

	for _, c := range []struct {
		name       string
		cfg        Config
		seq        string
		wantScales []float64
		wantHyst   []int // nil: not checked
	}{
		// Hysteresis 2, window 2, 0.19.5 growth. iter0 X: hyst 2→1, scale 16;
		// iter1 X: hyst 1 → halve to 8; iter2 .: stable 0; iter3 .: stable 1;
		// iter4 .: stable 2 → grow to 16, refill hysteresis 2; iter5 X → hyst 1.
		{"hysteresis 2", base, "XX...X", []float64{16, 8, 8, 8, 16, 16}, []int{1, 1, 1, 1, 2, 1}},
		// Legacy growth (0.14.5): iter2 .: (2−1)%2 ≠ 0; iter3 .: (3−1)%2 = 0 → grow one step earlier.
		{"legacy growth", legacy, "XX...X", []float64{16, 8, 8, 16, 16, 16}, nil},
		// From the start (last_overflow_iter −1) window 2: 0.19.5 grows at
		// iter 2 and 4 (stable 2, 4), 0.14.5 at iter 1, 3, 5.
		{"clean start", base, "......", []float64{16, 16, 32, 32, 64, 64}, nil},
		{"clean start, legacy", legacy, "......", []float64{16, 32, 32, 64, 64, 128}, nil},
		// Consecutive hysteresis refills after any clean step: X.X.X never drops.
		{"consecutive hysteresis", cons, "X.X.X.", []float64{16, 16, 16, 16, 16, 16}, []int{1, 2, 1, 2, 1, 2}},
		// Without it, the exhausted counter stays at 1: X.X halves at the second X.
		{"non-consecutive hysteresis", noCons, "X.X.X.", []float64{16, 16, 8, 8, 4, 4}, nil},
	} {
		scales, hyst, err := run(c.cfg, c.seq)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if d := cmp.Diff(c.wantScales, scales); d != "" {
			t.Errorf("%s scales (-want +got):\n%s", c.name, d)
		}
		if c.wantHyst == nil {
			continue
		}
		if d := cmp.Diff(c.wantHyst, hyst); d != "" {
			t.Errorf("%s counters (-want +got):\n%s", c.name, d)
		}
	}

	// Hysteresis 1, minimum 4 with raise: 16 → 8 → 4, then the error; the
	// state is unchanged by the failing call.
	h1 := base
	h1.DelayedShift, h1.MinScale = 1, 4
	d, err := NewDynamic(h1)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{8, 4} {
		if err := d.Update(true); err != nil || d.Scale() != want {
			t.Fatalf("overflow %d: scale %v err %v, want %v", i, d.Scale(), err, want)
		}
	}
	before := d.State()
	if err := d.Update(true); !errors.Is(err, ErrMinScale) {
		t.Fatalf("at the minimum: %v", err)
	}
	if d.State() != before {
		t.Errorf("failed update changed the state: %+v → %+v", before, d.State())
	}
	// Without raise it clamps at the minimum; a scale above the minimum
	// whose half is below it clamps too (6 → 4, no error).
	h1.RaiseErrorAtMinScale = false
	scales, _, err := run(h1, "XXXX")
	if err != nil || !cmp.Equal([]float64{8, 4, 4, 4}, scales) {
		t.Errorf("clamped: %v %v", scales, err)
	}
	h1.RaiseErrorAtMinScale, h1.InitScale = true, 6
	scales, _, err = run(h1, "X")
	if err != nil || scales[0] != 4 {
		t.Errorf("6 halves to the minimum 4 without error: %v %v", scales, err)
	}
}

func TestFP16OptimizerPolicy(t *testing.T) {
	f, err := NewFP16Optimizer(Config{InitScale: 8, ScaleWindow: 2, MinScale: 2, DelayedShift: 5, RaiseErrorAtMinScale: true, ScaleFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, ch := range "XXXX...X..." {
		if err := f.Update(ch == 'X'); err != nil {
			t.Fatal(err)
		}
		got = append(got, f.Scale())
	}
	// No hysteresis: every overflow halves, clamped at 2 without an error;
	// growth after a stable interval of 2 (iter 6) and again at iter 10.
	want := []float64{4, 2, 2, 2, 2, 2, 4, 2, 2, 2, 4}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if s := f.State(); s.CurIter != 11 || s.LastOverflowIter != 7 {
		t.Errorf("state %+v", s)
	}
}

func TestConfigFromFP16Block(t *testing.T) {
	c := DefaultFP16Block().Config()
	want := Config{InitScale: 65536, ScaleWindow: 1000, MinScale: 1, DelayedShift: 2, RaiseErrorAtMinScale: true, ScaleFactor: 2}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	if c := (FP16Block{InitialScalePower: -2, LossScaleWindow: 1, MinLossScale: 1}).Config(); c.InitScale != 0.25 {
		t.Errorf("2**-2 = %v", c.InitScale)
	}
	_, err := NewDynamic(Config{InitScale: 1, ScaleWindow: 0, MinScale: 0, ScaleFactor: 2})
	for _, want := range []string{"fp16.loss_scale_window must be > 0", "fp16.min_loss_scale must be > 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	c := DefaultFP16Block().Config()
	c.ScaleWindow = 3
	a, _ := NewDynamic(c)
	seq := patterns()["bursts"][:200]
	for _, o := range seq[:100] {
		a.Update(o)
	}
	b, _ := NewDynamic(c)
	b.LoadState(a.State())
	for _, o := range seq[100:] {
		a.Update(o)
		b.Update(o)
		if a.State() != b.State() {
			t.Fatalf("restored scaler diverged: %+v vs %+v", a.State(), b.State())
		}
	}
	s := NewStatic(128)
	if s.Update(true) != nil || s.Scale() != 128 || s.Dynamic() {
		t.Error("static scaler changed")
	}
}

func TestOverflowHelpers(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, tc := range []struct {
		x          []float32
		elem, sumd bool
	}{
		{[]float32{1, 2, 3}, false, false},
		{[]float32{1, inf, 3}, true, true},
		{[]float32{1, -inf}, true, true},
		{[]float32{nan, 0}, true, true},
		{[]float32{math.MaxFloat32, math.MaxFloat32}, false, true}, // finite, but the sum overflows
		{nil, false, false},
	} {
		if got := HasInfOrNaN(tc.x); got != tc.elem {
			t.Errorf("HasInfOrNaN(%v) = %v", tc.x, got)
		}
		if got := SumHasInfOrNaN(tc.x); got != tc.sumd {
			t.Errorf("SumHasInfOrNaN(%v) = %v", tc.x, got)
		}
	}
	x := []float32{1024, -2048, 3}
	Unscale(x, 1024)
	if !cmp.Equal([]float32{1, -2, float32(3) * float32(1.0/1024)}, x) {
		t.Errorf("Unscale: %v", x)
	}
	if UnscaleFactor(3) != float32(1.0/3) {
		t.Error("UnscaleFactor rounds the double reciprocal")
	}
}

// TestCleanScale: CleanScale is the scale a clean step's update would
// leave, and changes nothing. The sequences are DeepSpeed 0.14.5's own
// (conformance/testdata/deepspeed-0.14.5-cpu-gpt, initial_scale_power 8,
// loss_scale_window 3, no overflow): FP16_Optimizer at stage 0 carries
// 256 for steps 1–4 and 512 from step 5; ZeRO's DynamicLossScaler with
// the legacy growth rule 256 for steps 1–3 and 512 from step 4.
func TestCleanScale(t *testing.T) {
	b := FP16Block{InitialScalePower: 8, LossScaleWindow: 3, Hysteresis: 2, MinLossScale: 1}
	f, err := NewFP16Optimizer(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	c := b.Config()
	c.Growth = Legacy
	d, err := NewDynamic(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		s       Scaler
		carried []float64 // the scale each step's gradients carry, steps 1…
	}{{"FP16_Optimizer", f, []float64{256, 256, 256, 256, 512, 512, 512, 1024}},
		{"DynamicLossScaler legacy", d, []float64{256, 256, 256, 512, 512, 512, 1024, 1024}}} {
		for i, want := range tc.carried {
			if got := tc.s.Scale(); got != want {
				t.Fatalf("%s step %d: scale %v, want %v", tc.name, i+1, got, want)
			}
			before := tc.s.State()
			clean := CleanScale(tc.s)
			if tc.s.State() != before {
				t.Fatalf("%s step %d: CleanScale changed the state %+v to %+v", tc.name, i+1, before, tc.s.State())
			}
			if err := tc.s.Update(false); err != nil {
				t.Fatal(err)
			}
			if clean != tc.s.Scale() {
				t.Fatalf("%s step %d: CleanScale %v, the update gave %v", tc.name, i+1, clean, tc.s.Scale())
			}
		}
	}
	if s := NewStatic(128); CleanScale(s) != 128 {
		t.Errorf("static: CleanScale %v", CleanScale(s))
	}
}
