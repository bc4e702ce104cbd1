package lossscale

import (
	"errors"
	"fmt"
)

// Scaler is a loss scaler: the loss is multiplied by Scale before backward,
// the gradients divided by it before the optimizer step, and Update is
// called once per optimizer step with whether any gradient overflowed (a
// step with an overflow is skipped by the caller).
type Scaler interface {
	Scale() float64
	Dynamic() bool
	Update(overflow bool) error
	State() State
	LoadState(State) error
}

// State is what DeepSpeed checkpoints of a scaler (the attributes of the
// pickled LossScaler / DynamicLossScaler, and FP16_Optimizer's state_dict
// keys cur_scale, cur_iter, last_overflow_iter).
type State struct {
	CurScale         float64 // cur_scale
	CurIter          int     // cur_iter
	LastOverflowIter int     // last_overflow_iter, -1 before any overflow
	CurHysteresis    int     // cur_hysteresis (DynamicLossScaler only)
}

// ErrMinScale is returned by Update when the scale would drop below the
// minimum and raise_error_at_min_scale is set; DeepSpeed raises
// Exception with this text and the run ends.
var ErrMinScale = errors.New("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")

// Static is DeepSpeed's LossScaler: a fixed scale (fp16.loss_scale > 0;
// 1.0 for fp32 and bf16). Update never changes it.
type Static struct{ scale float64 }

var _ Scaler = (*Static)(nil)

// NewStatic returns a static scaler.
func NewStatic(scale float64) *Static { return &Static{scale: scale} }

func (s *Static) Scale() float64           { return s.scale }
func (s *Static) Dynamic() bool            { return false }
func (s *Static) Update(bool) error        { return nil }
func (s *Static) State() State             { return State{CurScale: s.scale, LastOverflowIter: -1} }
func (s *Static) LoadState(st State) error { s.scale = st.CurScale; return nil }

// GrowthRule says when a run of steps without overflow grows the scale.
type GrowthRule int

const (
	// StableInterval is DeepSpeed ≥ 0.17.1 (e440506be, "Improve overflow
	// handling in ZeRO"): with stable = cur_iter − last_overflow_iter − 1,
	// grow when stable > 0 and stable % scale_window == 0.
	StableInterval GrowthRule = iota
	// Legacy is DeepSpeed ≤ 0.17.0 (the 0.14.5 reference): grow when
	// (cur_iter − last_overflow_iter) % scale_window == 0.
	Legacy
)

// Config are DynamicLossScaler's arguments. DeepSpeed builds them from the
// fp16 block: init_scale = 2**initial_scale_power, scale_window =
// loss_scale_window, min_scale = min_loss_scale, delayed_shift =
// hysteresis, consecutive_hysteresis; raise_error_at_min_scale keeps its
// default true.
type Config struct {
	InitScale             float64 // init_scale
	ScaleWindow           int     // scale_window (> 0)
	MinScale              float64 // min_scale (> 0)
	DelayedShift          int     // delayed_shift: overflows tolerated before the scale drops
	ConsecutiveHysteresis bool    // consecutive_hysteresis: refill hysteresis after any clean step
	RaiseErrorAtMinScale  bool    // raise_error_at_min_scale
	// ScaleFactor is 2.0: fixed in 0.19.5, a constructor argument that
	// DeepSpeed never set in 0.14.5.
	ScaleFactor float64
	Growth      GrowthRule
}

// FP16Block is the fp16 section of a DeepSpeed config, with its defaults
// from DefaultFP16Block.
type FP16Block struct {
	InitialScalePower     int     // initial_scale_power, default 16
	LossScaleWindow       int     // loss_scale_window, default 1000
	Hysteresis            int     // hysteresis, default 2
	ConsecutiveHysteresis bool    // consecutive_hysteresis, default false
	MinLossScale          float64 // min_loss_scale, default 1
}

// DefaultFP16Block returns DeepSpeed's fp16 defaults.
func DefaultFP16Block() FP16Block {
	return FP16Block{InitialScalePower: 16, LossScaleWindow: 1000, Hysteresis: 2, MinLossScale: 1}
}

// Config is precision_config.dynamic_loss_scale_args for this block.
func (b FP16Block) Config() Config {
	return Config{
		InitScale:             pow2(b.InitialScalePower),
		ScaleWindow:           b.LossScaleWindow,
		MinScale:              b.MinLossScale,
		DelayedShift:          b.Hysteresis,
		ConsecutiveHysteresis: b.ConsecutiveHysteresis,
		RaiseErrorAtMinScale:  true,
		ScaleFactor:           2,
	}
}

// DynamicLossScalerDefaults are DynamicLossScaler's constructor defaults
// (init_scale 2^32, scale_window 1000, min_scale 1, delayed_shift 1), which
// DeepSpeed ≤ 0.17 used under ZeRO when the fp16 block set none of the
// dynamic-scaling keys.
func DynamicLossScalerDefaults() Config {
	return Config{InitScale: pow2(32), ScaleWindow: 1000, MinScale: 1, DelayedShift: 1, RaiseErrorAtMinScale: true, ScaleFactor: 2}
}

func pow2(n int) float64 {
	x := 1.0
	for ; n > 0; n-- {
		x *= 2
	}
	for ; n < 0; n++ {
		x /= 2
	}
	return x
}

func (c Config) validate() error {
	var errs []error
	if c.ScaleWindow <= 0 {
		errs = append(errs, fmt.Errorf("fp16.loss_scale_window must be > 0 when dynamic loss scaling is enabled (loss_scale=0), got %d", c.ScaleWindow))
	}
	if !(c.MinScale > 0) {
		errs = append(errs, fmt.Errorf("fp16.min_loss_scale must be > 0 when dynamic loss scaling is enabled (loss_scale=0), got %v", c.MinScale))
	}
	if !(c.ScaleFactor > 0) {
		errs = append(errs, fmt.Errorf("scale factor must be > 0, got %v", c.ScaleFactor))
	}
	return errors.Join(errs...)
}

// Dynamic is DeepSpeed's DynamicLossScaler (fp16/loss_scaler.py), used by
// the ZeRO optimizers with fp16 and dynamic loss scaling.
type Dynamic struct {
	c    Config
	cur  float64
	iter int
	last int
	hyst int
}

var _ Scaler = (*Dynamic)(nil)

// NewDynamic returns a dynamic scaler at c.InitScale.
func NewDynamic(c Config) (*Dynamic, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Dynamic{c: c, cur: c.InitScale, last: -1, hyst: c.DelayedShift}, nil
}

func (d *Dynamic) Scale() float64 { return d.cur }
func (d *Dynamic) Dynamic() bool  { return true }
func (d *Dynamic) Config() Config { return d.c }
func (d *Dynamic) State() State {
	return State{CurScale: d.cur, CurIter: d.iter, LastOverflowIter: d.last, CurHysteresis: d.hyst}
}

func (d *Dynamic) LoadState(s State) error {
	d.cur, d.iter, d.last, d.hyst = s.CurScale, s.CurIter, s.LastOverflowIter, s.CurHysteresis
	return nil
}

// Update is update_scale(overflow):
//
//	overflow:  if delayed_shift == 1 or cur_hysteresis == 1:
//	               at min_scale with raise_error_at_min_scale → ErrMinScale (nothing changes)
//	               else scale = max(scale/2, min_scale)
//	           else cur_hysteresis −= 1
//	           last_overflow_iter = cur_iter
//	clean:     consecutive_hysteresis → cur_hysteresis = delayed_shift
//	           on growth (GrowthRule): scale *= 2, and cur_hysteresis = delayed_shift
//	           unless consecutive_hysteresis
//	cur_iter += 1
//
// cur_hysteresis is not refilled by a scale drop: once exhausted, every
// further overflow halves the scale until a refill.
func (d *Dynamic) Update(overflow bool) error {
	c := d.c
	if overflow {
		if c.DelayedShift == 1 || d.hyst == 1 {
			if d.cur == c.MinScale && c.RaiseErrorAtMinScale {
				return ErrMinScale
			}
			d.cur = max(d.cur/c.ScaleFactor, c.MinScale)
		} else {
			d.hyst--
		}
		d.last = d.iter
	} else {
		if c.ConsecutiveHysteresis {
			d.hyst = c.DelayedShift
		}
		if d.grows() {
			if !c.ConsecutiveHysteresis {
				d.hyst = c.DelayedShift
			}
			d.cur *= c.ScaleFactor
		}
	}
	d.iter++
	return nil
}

func (d *Dynamic) grows() bool {
	if d.c.Growth == Legacy {
		return (d.iter-d.last)%d.c.ScaleWindow == 0
	}
	stable := d.iter - d.last - 1
	return stable > 0 && stable%d.c.ScaleWindow == 0
}

// FP16Optimizer is the loss-scale policy of DeepSpeed's FP16_Optimizer and
// FP16_UnfusedOptimizer (fp16 without ZeRO, fused_optimizer.py
// _update_scale): no hysteresis and no error at the minimum —
//
//	overflow: scale = max(scale/2, min_loss_scale); last_overflow_iter = cur_iter
//	clean:    stable = cur_iter − last_overflow_iter − 1;
//	          stable > 0 and stable % scale_window == 0 → scale *= 2
//	cur_iter += 1
type FP16Optimizer struct {
	c    Config
	cur  float64
	iter int
	last int
}

var _ Scaler = (*FP16Optimizer)(nil)

// NewFP16Optimizer returns the stage-0 fp16 policy; it uses InitScale,
// ScaleWindow, MinScale and ScaleFactor of c.
func NewFP16Optimizer(c Config) (*FP16Optimizer, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &FP16Optimizer{c: c, cur: c.InitScale, last: -1}, nil
}

func (f *FP16Optimizer) Scale() float64 { return f.cur }
func (f *FP16Optimizer) Dynamic() bool  { return true }
func (f *FP16Optimizer) State() State {
	return State{CurScale: f.cur, CurIter: f.iter, LastOverflowIter: f.last}
}

func (f *FP16Optimizer) LoadState(s State) error {
	f.cur, f.iter, f.last = s.CurScale, s.CurIter, s.LastOverflowIter
	return nil
}

// Update applies the policy above; it never fails.
func (f *FP16Optimizer) Update(overflow bool) error {
	if overflow {
		f.cur = max(f.cur/f.c.ScaleFactor, f.c.MinScale)
		f.last = f.iter
	} else if stable := f.iter - f.last - 1; stable > 0 && stable%f.c.ScaleWindow == 0 {
		f.cur *= f.c.ScaleFactor
	}
	f.iter++
	return nil
}

// CleanScale is the scale s would hold after Update(false), s left as it
// is. DeepSpeed updates the scale before it unscales (FP16_Optimizer,
// FP16_UnfusedOptimizer, ZeRO 1–3 alike: _update_scale, then
// unscale_and_clip_grads with the updated loss_scale), so a clean step
// divides its gradients by this.
func CleanScale(s Scaler) float64 {
	switch x := s.(type) {
	case *Dynamic:
		c := *x
		if c.Update(false) == nil {
			return c.cur
		}
	case *FP16Optimizer:
		c := *x
		if c.Update(false) == nil {
			return c.cur
		}
	}
	return s.Scale()
}
