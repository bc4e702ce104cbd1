package lrsched

import (
	"errors"
	"fmt"
	"math"
)

// ---- LRRangeTest ------------------------------------------------------

type lrRangeTest struct {
	p LRRangeTestParams
}

func newLRRangeTest(p LRRangeTestParams, v Version) (formula, error) {
	if p.StepSize <= 0 {
		return nil, fmt.Errorf("lr_range_test_step_size must be a positive integer, got %d", p.StepSize)
	}
	return &lrRangeTest{p: p}, nil
}

// lrAt: min_lr · (1 + step_rate · interval), interval = (it+1)/step_size,
// floored with staircase.
func (f *lrRangeTest) lrAt(it int) float64 {
	interval := float64(it+1) / float64(f.p.StepSize)
	if f.p.Staircase {
		interval = math.Floor(interval)
	}
	return f.p.MinLR * (1 + f.p.StepRate*interval)
}

func (f *lrRangeTest) betasAt(int) ([2]float64, bool) { return [2]float64{}, false }

// initLR: the constructor sets lr = lr_range_test_min_lr (both versions).
func (f *lrRangeTest) initLR() (float64, bool) { return f.p.MinLR, true }
func (f *lrRangeTest) warnings() []string      { return nil }

// ---- OneCycle ---------------------------------------------------------

type oneCycle struct {
	minLR, maxLR         float64
	decayLRRate          float64
	first, second, total float64
	stepRatio            float64
	firstStairs          int
	secondStairs         int
	decayStepSize        float64
	skipLRDecay          bool
	skipMomDecay         bool
	momentum             bool
	minMom, maxMom       float64
	decayMomRate         float64
	stairs               bool // 0.19.5 implements the stair counts
}

// oneCycleBeta2 is the beta2 OneCycle writes next to its momentum.
const oneCycleBeta2 = 0.99

func newOneCycle(p OneCycleParams, v Version) (formula, error) {
	if p.CycleMinLR == nil || p.CycleMaxLR == nil {
		return nil, errors.New("missing required parameters cycle_min_lr and cycle_max_lr")
	}
	first := p.CycleFirstStepSize
	second := first
	if p.CycleSecondStepSize != nil {
		second = *p.CycleSecondStepSize
	}
	if first <= 0 {
		return nil, fmt.Errorf("cycle_first_step_size must be positive, got %s", pyFloat(first))
	}
	if second < 0 {
		return nil, fmt.Errorf("cycle_second_step_size must be non-negative, got %s", pyFloat(second))
	}
	f := &oneCycle{minLR: *p.CycleMinLR, maxLR: *p.CycleMaxLR, decayLRRate: p.DecayLRRate,
		first: first, second: second, total: first + second,
		firstStairs: p.CycleFirstStairCount, secondStairs: p.CycleFirstStairCount,
		decayStepSize: p.DecayStepSize, momentum: p.CycleMomentum,
		minMom: p.CycleMinMom, maxMom: p.CycleMaxMom, decayMomRate: p.DecayMomRate,
		stairs: v != DeepSpeed0145}
	f.stepRatio = first / f.total
	if p.CycleSecondStairCount != nil {
		f.secondStairs = *p.CycleSecondStairCount
	}
	// math.isclose(x, 0) with default tolerances is x == 0.
	f.skipLRDecay = f.decayStepSize == 0 || f.decayLRRate == 0
	f.skipMomDecay = f.decayStepSize == 0 || f.decayMomRate == 0
	return f, nil
}

// scale is _get_scale_factor: the position in the triangle, 0 → 1 → 0.
func (f *oneCycle) scale(it int) float64 {
	b := float64(it + 1)
	cycle := math.Floor(1 + b/f.total)
	x := 1 + b/f.total - cycle
	var sf float64
	stairs := f.firstStairs
	if x <= f.stepRatio {
		sf = x / f.stepRatio
	} else {
		sf = (x - 1) / (f.stepRatio - 1)
		stairs = f.secondStairs
	}
	if f.stairs && stairs > 0 {
		ci := math.Mod(b, f.total) // Python's % (b ≥ 0)
		var pos float64
		if ci <= f.first {
			pos = ci * float64(stairs) / f.first
		} else {
			pos = (f.total - ci) * float64(stairs) / f.second
		}
		sf = math.Floor(pos) / float64(stairs)
	}
	return sf
}

func (f *oneCycle) lrAt(it int) float64 {
	if float64(it) < f.total {
		return f.minLR + (f.maxLR-f.minLR)*f.scale(it)
	}
	if f.skipLRDecay {
		return f.minLR
	}
	interval := (float64(it) - f.total + 1) / f.decayStepSize
	return f.minLR / (1 + f.decayLRRate*interval)
}

// betasAt: (cycle_min_mom, 0.99) at construction; then
// cycle_max_mom − (max−min)·scale during the cycle and
// cycle_max_mom·(1 + decay_mom_rate·interval) after it.
func (f *oneCycle) betasAt(it int) ([2]float64, bool) {
	if !f.momentum {
		return [2]float64{}, false
	}
	if it < 0 {
		return [2]float64{f.minMom, oneCycleBeta2}, true
	}
	if float64(it) < f.total {
		return [2]float64{f.maxMom - (f.maxMom-f.minMom)*f.scale(it), oneCycleBeta2}, true
	}
	if f.skipMomDecay {
		return [2]float64{f.maxMom, oneCycleBeta2}, true
	}
	interval := (float64(it) - f.total + 1) / f.decayStepSize
	return [2]float64{f.maxMom * (1 + f.decayMomRate*interval), oneCycleBeta2}, true
}

// initLR: the constructor sets lr = cycle_min_lr (both versions).
func (f *oneCycle) initLR() (float64, bool) { return f.minLR, true }
func (f *oneCycle) warnings() []string      { return nil }

// ---- WarmupLR and WarmupDecayLR ---------------------------------------

type warmupLR struct {
	minLR, delta float64
	warm         int // max(2, warmup_num_steps)
	invLogWarm   float64
	linear       bool
	decay        bool // WarmupDecayLR
	total        int
	version      Version
	warns        []string
}

func warmupType(t string) (linear bool, warn []string) {
	switch t {
	case WarmupLinear:
		return true, nil
	case WarmupLog:
		return false, nil
	}
	return false, []string{fmt.Sprintf("Using unknown warmup_type: %s. The increasing function is set to default (log)", t)}
}

// checkWarmupSteps is 0.19.5's validation; 0.14.5 took max(2, n) of anything.
func checkWarmupSteps(n int, v Version) error {
	if n <= 0 && v != DeepSpeed0145 {
		return fmt.Errorf("warmup_num_steps must be a positive integer, got %d", n)
	}
	return nil
}

func newWarmupLR(p WarmupLRParams, baseLR float64, v Version) (formula, error) {
	if err := checkWarmupSteps(p.NumSteps, v); err != nil {
		return nil, err
	}
	maxLR := baseLR
	switch {
	case p.MaxLR != nil:
		maxLR = *p.MaxLR
	case v == DeepSpeed0145:
		maxLR = 0.001
	}
	return newWarmup(p.MinLR, maxLR, p.NumSteps, p.Type, false, 0, v), nil
}

func newWarmupDecayLR(p WarmupDecayLRParams, v Version) (formula, error) {
	if p.TotalNumSteps == nil {
		return nil, errors.New("missing required parameter total_num_steps")
	}
	if err := checkWarmupSteps(p.NumSteps, v); err != nil {
		return nil, err
	}
	w := newWarmup(p.MinLR, p.MaxLR, p.NumSteps, p.Type, true, *p.TotalNumSteps, v)
	if w.total < w.warm {
		w.warns = append(w.warns, fmt.Sprintf("total_num_steps %d is less than warmup_num_steps %d", w.total, p.NumSteps))
	}
	return w, nil
}

func newWarmup(minLR, maxLR float64, steps int, typ string, decay bool, total int, v Version) *warmupLR {
	w := &warmupLR{minLR: minLR, delta: maxLR - minLR, warm: max(2, steps), decay: decay, total: total, version: v}
	w.linear, w.warns = warmupType(typ)
	w.invLogWarm = 1.0 / math.Log(float64(w.warm))
	return w
}

// gamma is _get_gamma: log(it+1)/log(W) or it/W during the warm-up, then 1
// (WarmupLR) or max(0, (T−it)/max(1, T−W)) (WarmupDecayLR).
func (w *warmupLR) gamma(it int) float64 {
	if it < w.warm {
		if w.linear {
			return float64(it) / float64(w.warm)
		}
		return w.invLogWarm * math.Log(float64(it+1))
	}
	if !w.decay {
		return 1.0
	}
	return math.Max(0, float64(w.total-it)/math.Max(1.0, float64(w.total-w.warm)))
}

// lrAt is min + (max − min)·gamma; before the first step (it < 0) get_lr
// returns min_lr (0.19.5) or 0 (0.14.5).
func (w *warmupLR) lrAt(it int) float64 {
	if it < 0 {
		if w.version == DeepSpeed0145 {
			return 0
		}
		return w.minLR
	}
	return w.minLR + w.delta*w.gamma(it)
}

func (w *warmupLR) betasAt(int) ([2]float64, bool) { return [2]float64{}, false }

// initLR: 0.19.5 writes get_lr() (= warmup_min_lr) into the optimizer at
// construction; 0.14.5 left the optimizer's own lr for the first step.
func (w *warmupLR) initLR() (float64, bool) {
	if w.version == DeepSpeed0145 {
		return 0, false
	}
	return w.minLR, true
}

func (w *warmupLR) warnings() []string { return w.warns }

// ---- WarmupCosineLR ---------------------------------------------------

type warmupCosineLR struct {
	orgLR       float64
	total       int
	minRatio    float64
	cosMinRatio float64
	warm        int
	invLogWarm  float64
	linear      bool
	version     Version
	warns       []string
}

func newWarmupCosineLR(p WarmupCosineLRParams, baseLR float64, v Version) (formula, error) {
	if p.TotalNumSteps == nil {
		return nil, errors.New("missing required parameter total_num_steps")
	}
	if err := checkWarmupSteps(p.NumSteps, v); err != nil {
		return nil, err
	}
	f := &warmupCosineLR{orgLR: baseLR, total: *p.TotalNumSteps, minRatio: p.WarmupMinRatio,
		cosMinRatio: p.CosMinRatio, warm: max(2, p.NumSteps), version: v}
	f.linear, f.warns = warmupType(p.Type)
	if v == DeepSpeed0145 && f.warns != nil {
		// 0.14.5 did not validate: an unknown type leaves ratio unbound.
		return nil, fmt.Errorf("warmup_type %q is neither log nor linear (DeepSpeed 0.14.5 fails at the first step)", p.Type)
	}
	if v == DeepSpeed0145 && f.total == f.warm {
		return nil, fmt.Errorf("total_num_steps %d equals the warm-up length: DeepSpeed 0.14.5 divides by zero after the warm-up", f.total)
	}
	f.invLogWarm = 1.0 / math.Log(float64(f.warm))
	if f.total < f.warm {
		f.warns = append(f.warns, fmt.Sprintf("total_num_steps %d is less than warmup_num_steps %d", f.total, p.NumSteps))
	}
	return f, nil
}

// ratio is get_lr_ratio: warmup_min_ratio + r·(1 − warmup_min_ratio) with
// r = log(it+1)/log(W) or it/W during the warm-up; then, with progress
// p = (it − W + 1)/max(1, T − W) clamped to ≤ 1 (0.19.5),
// max(0, cos_min + (1 − cos_min)·(1 + cos πp)/2).
func (f *warmupCosineLR) ratio(it int) float64 {
	if it < f.warm {
		var r float64
		if f.linear {
			r = float64(it) / float64(f.warm)
		} else {
			r = f.invLogWarm * math.Log(float64(it+1))
		}
		return f.minRatio + r*(1.-f.minRatio)
	}
	real := float64(it - f.warm + 1)
	var progress float64
	if f.version == DeepSpeed0145 {
		progress = real / float64(f.total-f.warm)
	} else {
		progress = math.Min(1.0, real/float64(max(1, f.total-f.warm)))
	}
	r := (1 + math.Cos(math.Pi*progress)) / 2
	return math.Max(0.0, f.cosMinRatio+(1.-f.cosMinRatio)*r)
}

// lrAt is org_lr · ratio; 0 before the first step.
func (f *warmupCosineLR) lrAt(it int) float64 {
	if it < 0 {
		return 0
	}
	return f.orgLR * f.ratio(it)
}

func (f *warmupCosineLR) betasAt(int) ([2]float64, bool) { return [2]float64{}, false }

// initLR: 0.19.5 writes get_lr() = 0 at construction, so the first step
// runs with lr 0; 0.14.5 kept the optimizer's lr.
func (f *warmupCosineLR) initLR() (float64, bool) {
	if f.version == DeepSpeed0145 {
		return 0, false
	}
	return 0, true
}

func (f *warmupCosineLR) warnings() []string { return f.warns }
