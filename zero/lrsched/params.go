package lrsched

// Typed parameters of each DeepSpeed scheduler, one field per key of the
// scheduler's "params" block. The config package starts from the Default*
// value and overwrites the keys the JSON sets. A nil pointer is Python's
// None (or a required key that is absent).

// Kind names, as in DeepSpeed's VALID_LR_SCHEDULES.
const (
	KindLRRangeTest    = "LRRangeTest"
	KindOneCycle       = "OneCycle"
	KindWarmupLR       = "WarmupLR"
	KindWarmupDecayLR  = "WarmupDecayLR"
	KindWarmupCosineLR = "WarmupCosineLR"
)

// Kinds lists the valid scheduler names in DeepSpeed's order.
func Kinds() []string {
	return []string{KindLRRangeTest, KindOneCycle, KindWarmupLR, KindWarmupDecayLR, KindWarmupCosineLR}
}

// Warmup types.
const (
	WarmupLog    = "log"
	WarmupLinear = "linear"
)

// Params is one scheduler's typed parameters.
type Params interface {
	Kind() string
}

// LRRangeTestParams are LRRangeTest's parameters.
type LRRangeTestParams struct {
	MinLR     float64 // lr_range_test_min_lr, default 1e-3
	StepSize  int     // lr_range_test_step_size, default 2000 (> 0)
	StepRate  float64 // lr_range_test_step_rate, default 1.0
	Staircase bool    // lr_range_test_staircase, default false
}

// DefaultLRRangeTest returns LRRangeTest's defaults.
func DefaultLRRangeTest() LRRangeTestParams {
	return LRRangeTestParams{MinLR: 1e-3, StepSize: 2000, StepRate: 1.0}
}

func (LRRangeTestParams) Kind() string { return KindLRRangeTest }

// OneCycleParams are OneCycle's parameters.
type OneCycleParams struct {
	CycleMinLR  *float64 // cycle_min_lr, required
	CycleMaxLR  *float64 // cycle_max_lr, required
	DecayLRRate float64  // decay_lr_rate, default 0
	// CycleFirstStepSize is cycle_first_step_size, default 2000 (> 0).
	CycleFirstStepSize float64
	// CycleSecondStepSize is cycle_second_step_size, default None = the first.
	CycleSecondStepSize *float64
	// CycleFirstStairCount is cycle_first_stair_count, default 0 (continuous).
	CycleFirstStairCount int
	// CycleSecondStairCount is cycle_second_stair_count, default None = the first.
	CycleSecondStairCount *int
	DecayStepSize         float64 // decay_step_size, default 0 (no decay)
	CycleMomentum         bool    // cycle_momentum, default true
	CycleMinMom           float64 // cycle_min_mom, default 0.8
	CycleMaxMom           float64 // cycle_max_mom, default 0.9
	DecayMomRate          float64 // decay_mom_rate, default 0
}

// DefaultOneCycle returns OneCycle's defaults (the two lrs stay unset).
func DefaultOneCycle() OneCycleParams {
	return OneCycleParams{CycleFirstStepSize: 2000, CycleMomentum: true, CycleMinMom: 0.8, CycleMaxMom: 0.9}
}

func (OneCycleParams) Kind() string { return KindOneCycle }

// WarmupLRParams are WarmupLR's parameters.
type WarmupLRParams struct {
	MinLR float64 // warmup_min_lr, default 0
	// MaxLR is warmup_max_lr: default None = the optimizer's lr (0.19.5);
	// DeepSpeed 0.14.5 defaulted to 0.001 instead.
	MaxLR    *float64
	NumSteps int    // warmup_num_steps, default 1000 (> 0; max(2, n) is used)
	Type     string // warmup_type, default "log"
}

// DefaultWarmupLR returns WarmupLR's defaults.
func DefaultWarmupLR() WarmupLRParams { return WarmupLRParams{NumSteps: 1000, Type: WarmupLog} }

func (WarmupLRParams) Kind() string { return KindWarmupLR }

// WarmupDecayLRParams are WarmupDecayLR's parameters.
type WarmupDecayLRParams struct {
	TotalNumSteps *int    // total_num_steps, required
	MinLR         float64 // warmup_min_lr, default 0
	MaxLR         float64 // warmup_max_lr, default 0.001
	NumSteps      int     // warmup_num_steps, default 1000
	Type          string  // warmup_type, default "log"
}

// DefaultWarmupDecayLR returns WarmupDecayLR's defaults.
func DefaultWarmupDecayLR() WarmupDecayLRParams {
	return WarmupDecayLRParams{MaxLR: 0.001, NumSteps: 1000, Type: WarmupLog}
}

func (WarmupDecayLRParams) Kind() string { return KindWarmupDecayLR }

// WarmupCosineLRParams are WarmupCosineLR's parameters; the rates are
// ratios of the optimizer's lr at construction.
type WarmupCosineLRParams struct {
	TotalNumSteps  *int    // total_num_steps, required
	WarmupMinRatio float64 // warmup_min_ratio, default 0
	NumSteps       int     // warmup_num_steps, default 1000
	CosMinRatio    float64 // cos_min_ratio, default 1e-4
	Type           string  // warmup_type, default "log"
}

// DefaultWarmupCosineLR returns WarmupCosineLR's defaults.
func DefaultWarmupCosineLR() WarmupCosineLRParams {
	return WarmupCosineLRParams{NumSteps: 1000, CosMinRatio: 1e-4, Type: WarmupLog}
}

func (WarmupCosineLRParams) Kind() string { return KindWarmupCosineLR }

// Int and Float return pointers, for the optional and required fields.
func Int(v int) *int           { return &v }
func Float(v float64) *float64 { return &v }
