package lrsched

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// usedLRs returns the lr each of the first n optimizer steps runs with: the
// optimizer's lr after construction, then the lr after each Step.
func usedLRs(s Scheduler, n int) []float64 {
	out := []float64{s.LR()}
	for len(out) < n {
		s.Step()
		out = append(out, s.LR())
	}
	return out
}

func referenceSched(t *testing.T, v Version) Scheduler {
	t.Helper()
	s, err := NewVersion(KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(10), MinLR: 1e-4, MaxLR: 1e-3,
		NumSteps: 3, Type: WarmupLinear}, 1e-3, v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The reference harness README: with optimizer lr 1e-3 the LRs of steps
// 1..10 under DeepSpeed 0.14.5 are these (4 significant digits).
func TestWarmupDecayLRReferenceSequence(t *testing.T) {
	want := []float64{1e-3, 1e-4, 4e-4, 7e-4, 1e-3, 8.714e-4, 7.429e-4, 6.143e-4, 4.857e-4, 3.571e-4}
	got := usedLRs(referenceSched(t, DeepSpeed0145), 10)
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(2e-4, 0)); d != "" {
		t.Errorf("0.14.5 LRs (-README +got):\n%s", d)
	}
	// 0.19.5 writes warmup_min_lr into the optimizer at construction
	// ("Add first Step in LR Schedulers", #6597), so step 1 runs at 1e-4.
	got19 := usedLRs(referenceSched(t, DeepSpeed0195), 10)
	if got19[0] != 1e-4 {
		t.Errorf("0.19.5 step-1 lr = %v, want warmup_min_lr 1e-4", got19[0])
	}
	if d := cmp.Diff(got[1:], got19[1:]); d != "" {
		t.Errorf("0.19.5 differs after step 1 (-0.14.5 +0.19.5):\n%s", d)
	}
}

// lr_used of every step of the real DeepSpeed 0.14.5 runs, bit for bit.
func TestWarmupDecayLRMatchesReferenceRuns(t *testing.T) {
	// The reference runs' results, as the conformance cases carry them.
	files, _ := filepath.Glob("../../conformance/testdata/deepspeed-0.14.5-cpu/*/*/result.json")
	if len(files) == 0 {
		t.Fatal("no reference results under ../../conformance/testdata")
	}
	compared := 0
	defer func() {
		if compared == 0 {
			t.Error("no reference step compared")
		}
	}()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Steps []struct {
				LRUsed *float64 `json:"lr_used"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Steps) == 0 || r.Steps[0].LRUsed == nil {
			continue
		}
		got := usedLRs(referenceSched(t, DeepSpeed0145), len(r.Steps))
		for i, s := range r.Steps {
			if *s.LRUsed != got[i] {
				t.Errorf("%s step %d: lr %v, DeepSpeed %v", f, i+1, got[i], *s.LRUsed)
			}
			compared++
		}
	}
}

// Independent transcriptions of DeepSpeed 0.19.5's formulas, evaluated at
// last_batch_iteration it.
func refWarmupGamma(it, n int, typ string) float64 {
	w := math.Max(2, float64(n))
	if float64(it) < w {
		if typ == "linear" {
			return float64(it) / w
		}
		return math.Log(float64(it)+1) / math.Log(w)
	}
	return 1
}

func refDecay(it, n, total int) float64 {
	w := math.Max(2, float64(n))
	return math.Max(0, (float64(total)-float64(it))/math.Max(1, float64(total)-w))
}

func refCosine(it, n, total int, typ string, minRatio, cosMin float64) float64 {
	w := math.Max(2, float64(n))
	if float64(it) < w {
		return minRatio + refWarmupGamma(it, n, typ)*(1-minRatio)
	}
	progress := math.Min(1, (float64(it)-w+1)/math.Max(1, float64(total)-w))
	return math.Max(0, cosMin+(1-cosMin)*(1+math.Cos(math.Pi*progress))/2)
}

func refOneCycle(it int, first, second, lo, hi, mlo, mhi float64) (lr, mom float64) {
	total := first + second
	b := float64(it + 1)
	x := b/total - math.Floor(b/total)
	var sf float64
	if x <= first/total {
		sf = x / (first / total)
	} else {
		sf = (1 - x) / (1 - first/total)
	}
	return lo + (hi-lo)*sf, mhi - (mhi-mlo)*sf
}

func TestSchedulersFollowTheirFormulas(t *testing.T) {
	approx := cmpopts.EquateApprox(1e-12, 1e-18)
	const steps = 3000
	type tc struct {
		name string
		kind string
		p    Params
		base float64
		ref  func(it int) float64
	}
	cases := []tc{
		{"WarmupLR log", KindWarmupLR, WarmupLRParams{MinLR: 1e-5, MaxLR: Float(3e-4), NumSteps: 1000, Type: "log"}, 1,
			func(it int) float64 { return 1e-5 + (3e-4-1e-5)*refWarmupGamma(it, 1000, "log") }},
		{"WarmupLR linear, max from optimizer", KindWarmupLR, WarmupLRParams{NumSteps: 500, Type: "linear"}, 2e-3,
			func(it int) float64 { return 2e-3 * refWarmupGamma(it, 500, "linear") }},
		{"WarmupLR one step means two", KindWarmupLR, WarmupLRParams{MaxLR: Float(1), NumSteps: 1, Type: "linear"}, 1,
			func(it int) float64 { return refWarmupGamma(it, 1, "linear") }},
		{"WarmupDecayLR log", KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(2500), MinLR: 1e-6, MaxLR: 1e-3, NumSteps: 100, Type: "log"}, 1,
			func(it int) float64 {
				g := refWarmupGamma(it, 100, "log")
				if it >= 100 {
					g = refDecay(it, 100, 2500)
				}
				return 1e-6 + (1e-3-1e-6)*g
			}},
		{"WarmupCosineLR", KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(2000), WarmupMinRatio: 0.1, NumSteps: 200, CosMinRatio: 1e-4, Type: "log"}, 5e-4,
			func(it int) float64 { return 5e-4 * refCosine(it, 200, 2000, "log", 0.1, 1e-4) }},
		{"OneCycle", KindOneCycle, OneCycleParams{CycleMinLR: Float(1e-4), CycleMaxLR: Float(1e-2), CycleFirstStepSize: 400, CycleSecondStepSize: Float(600), CycleMomentum: true, CycleMinMom: 0.85, CycleMaxMom: 0.95}, 1,
			func(it int) float64 {
				if it >= 1000 {
					return 1e-4
				}
				lr, _ := refOneCycle(it, 400, 600, 1e-4, 1e-2, 0.85, 0.95)
				return lr
			}},
		{"LRRangeTest continuous", KindLRRangeTest, LRRangeTestParams{MinLR: 1e-4, StepSize: 100, StepRate: 0.5}, 1,
			func(it int) float64 { return 1e-4 * (1 + 0.5*float64(it+1)/100) }},
		{"LRRangeTest staircase", KindLRRangeTest, LRRangeTestParams{MinLR: 1e-4, StepSize: 100, StepRate: 2, Staircase: true}, 1,
			func(it int) float64 { return 1e-4 * (1 + 2*math.Floor(float64(it+1)/100)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.kind, c.p, c.base)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []float64
			for it := 0; it < steps; it++ {
				s.Step()
				got = append(got, s.LR())
				want = append(want, c.ref(it))
			}
			if d := cmp.Diff(want, got, approx); d != "" {
				t.Errorf("(-formula +scheduler):\n%s", d)
			}
			if s.LastBatchIteration() != steps-1 {
				t.Errorf("last_batch_iteration = %d", s.LastBatchIteration())
			}
		})
	}
}

// A handful of values worked out by hand.
func TestSchedulersByHand(t *testing.T) {
	at := func(kind string, p Params, base float64, it int) float64 {
		s, err := New(kind, p, base)
		if err != nil {
			t.Fatal(err)
		}
		s.StepTo(it)
		return s.LR()
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		// log warm-up over 1000 steps: at it = 9, log 10 / log 1000 = 1/3.
		{"WarmupLR log 1/3", at(KindWarmupLR, WarmupLRParams{MaxLR: Float(3e-3), NumSteps: 1000, Type: "log"}, 1, 9), 1e-3},
		{"WarmupLR after warm-up", at(KindWarmupLR, WarmupLRParams{MinLR: 1, MaxLR: Float(2), NumSteps: 10, Type: "log"}, 1, 50), 2},
		// decay: T=10, W=3, it=6 → (10-6)/7 of the way from min to max.
		{"WarmupDecayLR it 6", at(KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(10), MaxLR: 7, NumSteps: 3, Type: "linear"}, 1, 6), 4},
		{"WarmupDecayLR past total", at(KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(10), MinLR: 0.5, MaxLR: 7, NumSteps: 3, Type: "linear"}, 1, 12), 0.5},
		// cosine: T=10, W=3 linear; it=3 is 1/7 of the decay: (1+cos(π/7))/2 with cos_min 0.
		{"WarmupCosineLR it 1", at(KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(10), NumSteps: 3, Type: "linear"}, 6, 1), 2},
		{"WarmupCosineLR it 3", at(KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(10), NumSteps: 3, Type: "linear"}, 1, 3), (1 + math.Cos(math.Pi/7)) / 2},
		{"WarmupCosineLR end", at(KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(10), NumSteps: 3, CosMinRatio: 0.01, Type: "linear"}, 2, 9), 0.02},
		{"WarmupCosineLR clamped past end", at(KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(10), NumSteps: 3, CosMinRatio: 0.01, Type: "linear"}, 2, 16), 0.02},
		// OneCycle 4+4: it=1 → batch 2 → halfway up.
		{"OneCycle up", at(KindOneCycle, OneCycleParams{CycleMinLR: Float(0.1), CycleMaxLR: Float(1), CycleFirstStepSize: 4, CycleMomentum: true, CycleMinMom: 0.8, CycleMaxMom: 0.9}, 1, 1), 0.55},
		{"OneCycle peak", at(KindOneCycle, OneCycleParams{CycleMinLR: Float(0.1), CycleMaxLR: Float(1), CycleFirstStepSize: 4}, 1, 3), 1},
		{"OneCycle decay", at(KindOneCycle, OneCycleParams{CycleMinLR: Float(0.1), CycleMaxLR: Float(1), CycleFirstStepSize: 4, DecayStepSize: 2, DecayLRRate: 1}, 1, 11), 0.1 / 3}, // interval (11-8+1)/2 = 2
		{"LRRangeTest", at(KindLRRangeTest, LRRangeTestParams{MinLR: 1e-3, StepSize: 10, StepRate: 1}, 1, 19), 3e-3},
		{"LRRangeTest staircase", at(KindLRRangeTest, LRRangeTestParams{MinLR: 1e-3, StepSize: 10, StepRate: 1, Staircase: true}, 1, 18), 2e-3},
	} {
		if math.Abs(tc.got-tc.want) > 1e-12*math.Abs(tc.want)+1e-18 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestConstructionEffects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  string
		p     Params
		v     Version
		want  float64
		betas bool
	}{
		{"WarmupLR 0.19.5 sets min", KindWarmupLR, WarmupLRParams{MinLR: 2e-5, NumSteps: 10, Type: "log"}, DeepSpeed0195, 2e-5, false},
		{"WarmupLR 0.14.5 keeps optimizer lr", KindWarmupLR, WarmupLRParams{MinLR: 2e-5, NumSteps: 10, Type: "log"}, DeepSpeed0145, 0.5, false},
		{"WarmupCosineLR 0.19.5 starts at 0", KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(100), WarmupMinRatio: 0.5, NumSteps: 10, Type: "log"}, DeepSpeed0195, 0, false},
		{"WarmupCosineLR 0.14.5 keeps optimizer lr", KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(100), NumSteps: 10, Type: "log"}, DeepSpeed0145, 0.5, false},
		{"OneCycle sets cycle_min_lr and betas", KindOneCycle, OneCycleParams{CycleMinLR: Float(1e-4), CycleMaxLR: Float(1e-3), CycleFirstStepSize: 10, CycleMomentum: true, CycleMinMom: 0.8, CycleMaxMom: 0.9}, DeepSpeed0145, 1e-4, true},
		{"LRRangeTest sets min", KindLRRangeTest, DefaultLRRangeTest(), DeepSpeed0195, 1e-3, false},
	} {
		s, err := NewVersion(tc.kind, tc.p, 0.5, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if s.LR() != tc.want || s.LastBatchIteration() != -1 {
			t.Errorf("%s: lr %v at iteration %d, want %v at -1", tc.name, s.LR(), s.LastBatchIteration(), tc.want)
		}
		b, ok := s.Betas()
		if ok != tc.betas || (ok && b != [2]float64{0.8, 0.99}) {
			t.Errorf("%s: betas %v %v", tc.name, b, ok)
		}
	}
	// WarmupLR's warmup_max_lr: None means the optimizer's lr in 0.19.5,
	// 0.001 in 0.14.5.
	for v, want := range map[Version]float64{DeepSpeed0195: 0.5, DeepSpeed0145: 0.001} {
		s, _ := NewVersion(KindWarmupLR, WarmupLRParams{NumSteps: 10, Type: "linear"}, 0.5, v)
		s.StepTo(20)
		if s.LR() != want {
			t.Errorf("%v: warmed-up lr %v, want %v", v, s.LR(), want)
		}
	}
}

func TestOneCycleMomentumAndStairs(t *testing.T) {
	p := OneCycleParams{CycleMinLR: Float(0), CycleMaxLR: Float(1), CycleFirstStepSize: 8, CycleFirstStairCount: 4,
		CycleMomentum: true, CycleMinMom: 0.8, CycleMaxMom: 0.9, DecayStepSize: 4, DecayMomRate: 0.5}
	s19, _ := NewVersion(KindOneCycle, p, 1, DeepSpeed0195)
	s14, _ := NewVersion(KindOneCycle, p, 1, DeepSpeed0145)
	var lr19, lr14, mom []float64
	for it := 0; it < 20; it++ {
		s19.Step()
		s14.Step()
		lr19 = append(lr19, s19.LR())
		lr14 = append(lr14, s14.LR())
		b, _ := s19.Betas()
		mom = append(mom, b[0])
		if b[1] != 0.99 {
			t.Fatalf("beta2 %v, OneCycle writes 0.99", b[1])
		}
	}
	// 4 stairs over an 8-step half: batch 1..16 → floor(batch·4/8)/4 going
	// up, floor((16−batch)·4/8)/4 going down; then min_lr (no lr decay rate).
	wantStairs := []float64{0, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 0.75, 0.75, 0.5, 0.5, 0.25, 0.25, 0, 0, 0, 0, 0, 0}
	if d := cmp.Diff(wantStairs, lr19); d != "" {
		t.Errorf("0.19.5 staircase (-want +got):\n%s", d)
	}
	wantLinear := []float64{0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0, 0, 0, 0, 0}
	if d := cmp.Diff(wantLinear, lr14, cmpopts.EquateApprox(0, 1e-15)); d != "" {
		t.Errorf("0.14.5 ignores stair counts (-want +got):\n%s", d)
	}
	// Momentum mirrors the lr inside the cycle, then grows by decay_mom_rate.
	for it, m := range mom[:16] {
		if want := 0.9 - 0.1*wantStairs[it]; math.Abs(m-want) > 1e-15 {
			t.Errorf("it %d: momentum %v, want %v", it, m, want)
		}
	}
	// it = 16: interval (16−16+1)/4 → 0.9·(1+0.5·0.25).
	if want := 0.9 * (1 + 0.5*0.25); math.Abs(mom[16]-want) > 1e-15 {
		t.Errorf("decayed momentum %v, want %v", mom[16], want)
	}
	off, _ := New(KindOneCycle, OneCycleParams{CycleMinLR: Float(0), CycleMaxLR: Float(1), CycleFirstStepSize: 8}, 1)
	if _, ok := off.Betas(); ok {
		t.Error("cycle_momentum false must leave betas alone")
	}
}

func TestStateDictRoundTrip(t *testing.T) {
	a := referenceSched(t, DeepSpeed0195)
	for i := 0; i < 10; i++ {
		a.Step()
	}
	sd := a.StateDict()
	if d := cmp.Diff(map[string]any{"last_batch_iteration": 9}, sd); d != "" {
		t.Fatalf("state dict (-want +got):\n%s", d)
	}
	b := referenceSched(t, DeepSpeed0195)
	// A checkpoint read back from JSON carries the number as float64.
	if err := b.LoadStateDict(map[string]any{"last_batch_iteration": float64(9)}); err != nil {
		t.Fatal(err)
	}
	if b.LR() != a.LR() || b.LastBatchIteration() != 9 {
		t.Errorf("restored lr %v it %d, want %v 9", b.LR(), b.LastBatchIteration(), a.LR())
	}
	a.Step()
	b.Step()
	if a.LR() != b.LR() {
		t.Errorf("after a step: %v vs %v", a.LR(), b.LR())
	}
	if err := b.LoadStateDict(map[string]any{}); err == nil {
		t.Error("missing last_batch_iteration accepted")
	}
}

func TestConstructorErrors(t *testing.T) {
	for _, tc := range []struct {
		kind string
		p    Params
		v    Version
		want string
	}{
		{"CosineAnnealingLR", nil, DeepSpeed0195, "valid: LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR"},
		{KindWarmupLR, WarmupDecayLRParams{}, DeepSpeed0195, "given WarmupDecayLR parameters"},
		{KindWarmupLR, WarmupLRParams{NumSteps: 0}, DeepSpeed0195, "warmup_num_steps must be a positive integer, got 0"},
		{KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(5), NumSteps: -3}, DeepSpeed0195, "warmup_num_steps must be a positive integer, got -3"},
		{KindWarmupDecayLR, nil, DeepSpeed0195, "missing required parameter total_num_steps"},
		{KindWarmupCosineLR, WarmupCosineLRParams{NumSteps: 5}, DeepSpeed0195, "missing required parameter total_num_steps"},
		{KindLRRangeTest, LRRangeTestParams{StepSize: 0}, DeepSpeed0195, "lr_range_test_step_size must be a positive integer, got 0"},
		{KindOneCycle, nil, DeepSpeed0195, "missing required parameters cycle_min_lr and cycle_max_lr"},
		{KindOneCycle, OneCycleParams{CycleMinLR: Float(0), CycleMaxLR: Float(1)}, DeepSpeed0195, "cycle_first_step_size must be positive, got 0.0"},
		{KindOneCycle, OneCycleParams{CycleMinLR: Float(0), CycleMaxLR: Float(1), CycleFirstStepSize: 10, CycleSecondStepSize: Float(-2)}, DeepSpeed0195, "cycle_second_step_size must be non-negative, got -2.0"},
		{KindWarmupCosineLR, WarmupCosineLRParams{TotalNumSteps: Int(10), NumSteps: 10, Type: "log"}, DeepSpeed0145, "divides by zero"},
	} {
		_, err := NewVersion(tc.kind, tc.p, 1e-3, tc.v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, %+v) error %v, want %q", tc.kind, tc.p, err, tc.want)
		}
	}
	// 0.14.5 did not validate warmup_num_steps: max(2, 0) = 2 is used.
	if _, err := NewVersion(KindWarmupLR, WarmupLRParams{NumSteps: 0, Type: "log"}, 1, DeepSpeed0145); err != nil {
		t.Errorf("0.14.5 rejected warmup_num_steps 0: %v", err)
	}
}

func TestWarnings(t *testing.T) {
	s, err := New(KindWarmupDecayLR, WarmupDecayLRParams{TotalNumSteps: Int(5), MaxLR: 1, NumSteps: 10, Type: "cosine"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(s.Warnings(), "\n")
	for _, want := range []string{"Using unknown warmup_type: cosine", "total_num_steps 5 is less than warmup_num_steps 10"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	// The unknown type falls back to log.
	s.StepTo(3)
	if want := math.Log(4) / math.Log(10); math.Abs(s.LR()-want) > 1e-15 {
		t.Errorf("fallback lr %v, want log warm-up %v", s.LR(), want)
	}
}

func TestDefaults(t *testing.T) {
	if d := cmp.Diff(LRRangeTestParams{MinLR: 1e-3, StepSize: 2000, StepRate: 1}, DefaultLRRangeTest()); d != "" {
		t.Error(d)
	}
	if d := cmp.Diff(WarmupDecayLRParams{MaxLR: 0.001, NumSteps: 1000, Type: "log"}, DefaultWarmupDecayLR()); d != "" {
		t.Error(d)
	}
	if d := cmp.Diff(WarmupCosineLRParams{NumSteps: 1000, CosMinRatio: 0.0001, Type: "log"}, DefaultWarmupCosineLR()); d != "" {
		t.Error(d)
	}
	oc := DefaultOneCycle()
	if oc.CycleFirstStepSize != 2000 || !oc.CycleMomentum || oc.CycleMinMom != 0.8 || oc.CycleMaxMom != 0.9 || oc.CycleSecondStepSize != nil || oc.CycleSecondStairCount != nil {
		t.Errorf("OneCycle defaults %+v", oc)
	}
	if w := DefaultWarmupLR(); w.MaxLR != nil || w.NumSteps != 1000 || w.Type != "log" || w.MinLR != 0 {
		t.Errorf("WarmupLR defaults %+v", w)
	}
}
