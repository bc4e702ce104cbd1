package conformance

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// Status is a case's verdict.
type Status string

const (
	Pass        Status = "pass"
	Fail        Status = "fail"
	Unsupported Status = "unsupported" // a model or feature dszero does not run: never a pass
	NoResult    Status = "no result"   // the reference run produced nothing to compare with
	Error       Status = "error"       // the case could not be read or dszero's run failed
)

// NotChecked is the value of a check the runner does not make yet.
const NotChecked = "not checked"

// Tolerances bound each comparison. Zero fields take the defaults of the
// run's dtype (Defaults).
type Tolerances struct {
	LossRel     float64 `json:"loss_rel"`      // step and micro-step losses, relative
	GradNormRel float64 `json:"grad_norm_rel"` // gradient norms, relative
	LRRel       float64 `json:"lr_rel"`        // learning rates, relative
	WeightsAbs  float64 `json:"weights_abs"`   // final fp32 weights, absolute
}

// Defaults are the tolerances of a dtype: fp32 losses 1e-5 relative and
// weights 1e-5 absolute; bf16 and fp16 1e-3 and 5e-3. Gradient norms share
// the losses' tolerance in fp32 and 5e-3 relative in 16 bits (the norm of
// 16-bit gradients moves more than the loss); learning rates are held to
// 1e-12.
func Defaults(dtype device.DType) Tolerances {
	if dtype == device.BF16 || dtype == device.F16 {
		return Tolerances{LossRel: 1e-3, GradNormRel: 5e-3, LRRel: 1e-12, WeightsAbs: 5e-3}
	}
	return Tolerances{LossRel: 1e-5, GradNormRel: 1e-5, LRRel: 1e-12, WeightsAbs: 1e-5}
}

func (t Tolerances) or(d Tolerances) Tolerances {
	pick := func(a, b float64) float64 {
		if a > 0 {
			return a
		}
		return b
	}
	return Tolerances{pick(t.LossRel, d.LossRel), pick(t.GradNormRel, d.GradNormRel), pick(t.LRRel, d.LRRel), pick(t.WeightsAbs, d.WeightsAbs)}
}

// Metric is the largest difference of one series from the reference.
type Metric struct {
	N      int     `json:"n"` // values compared; 0: not compared
	MaxAbs float64 `json:"max_abs"`
	// MaxRel is the largest |Δ|/|want|; for the weights, where an element
	// near zero makes that meaningless, it is ‖Δ‖₂/‖want‖₂ instead.
	MaxRel float64 `json:"max_rel"`
	Tol    float64 `json:"tol"`
	// Rel says the tolerance bounds MaxRel (else MaxAbs).
	Rel bool `json:"tol_is_relative"`
}

func (m *Metric) add(got, want float64) {
	m.N++
	d := math.Abs(got - want)
	m.MaxAbs = math.Max(m.MaxAbs, d)
	if want != 0 {
		m.MaxRel = math.Max(m.MaxRel, d/math.Abs(want))
	} else if d != 0 {
		m.MaxRel = math.MaxFloat64 // JSON has no infinity
	}
	if math.IsNaN(got) {
		m.MaxAbs, m.MaxRel = math.MaxFloat64, math.MaxFloat64
	}
}

// OK says the metric is within its tolerance (vacuously when not compared).
func (m Metric) OK() bool {
	if m.Rel {
		return m.MaxRel <= m.Tol
	}
	return m.MaxAbs <= m.Tol
}

// Report is one case's outcome.
type Report struct {
	Case   string `json:"case"`
	Dir    string `json:"dir"`
	Status Status `json:"status"`
	// Reason says why a case is not a pass: the failed comparisons, the
	// unsupported feature, the error.
	Reason string `json:"reason,omitempty"`
	Model  string `json:"model,omitempty"` // dszero's architecture and size
	World  int    `json:"world_size,omitempty"`
	Stage  int    `json:"stage"`
	DType  string `json:"dtype,omitempty"`
	Steps  int    `json:"steps,omitempty"`

	Loss      Metric `json:"loss"`
	Micro     Metric `json:"micro_loss"`
	GradNorm  Metric `json:"grad_norm"`
	LR        Metric `json:"lr"`
	LossScale Metric `json:"loss_scale"`
	Weights   Metric `json:"weights"`
	// WeightsFile is the reference file the final weights were compared
	// with (the run's own, or the one final_fp32_identical_to names).
	WeightsFile string `json:"weights_file,omitempty"`
	// Noise compares the noise-driven elements' final weights, which
	// Weights leaves out (noise.go); nil when the model has none.
	Noise *NoiseReport `json:"noise_driven,omitempty"`
	// Checkpoint is the layout check of dszero's checkpoint against the
	// recorded one: "match: N files", "differs: …", "not recorded".
	Checkpoint string `json:"checkpoint"`
	// Resume is the resume check: dszero's own step-5 checkpoint
	// ("bit-exact" or "differs") and, when the case holds DeepSpeed's,
	// the run resumed from it, whose metrics are ResumeLoss (steps 6…,
	// relative) and ResumeWeights (final weights).
	Resume        string  `json:"resume"`
	ResumeLoss    *Metric `json:"resume_deepspeed_loss,omitempty"`
	ResumeWeights *Metric `json:"resume_deepspeed_weights,omitempty"`
	// Kind is a facts case's kind (KindLRSchedule, …); "" for a run.
	Kind string `json:"kind,omitempty"`
	// Facts compares a facts case's values (Steps is its number of
	// entries).
	Facts    Metric   `json:"facts"`
	Notes    string   `json:"notes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Seconds  float64  `json:"seconds"`
}

// versions are the DeepSpeed releases whose semantics dszero reproduces.
var versions = map[string]lrsched.Version{"0.14.5": lrsched.DeepSpeed0145, "0.19.5": lrsched.DeepSpeed0195}

// Run loads the case, trains it with dszero on its world size and
// compares every recorded series with the reference. It never panics on a
// bad case: the report says what went wrong.
func Run(c Case) (rep Report) {
	start := time.Now()
	rep = Report{Case: c.Name, Dir: c.Dir, Checkpoint: NotChecked, Resume: NotChecked}
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	fail := func(err error) Report {
		var u *unsupportedError
		if errors.As(err, &u) {
			rep.Status, rep.Reason = Unsupported, u.msg
		} else {
			rep.Status, rep.Reason = Error, err.Error()
		}
		return rep
	}
	if c.Facts {
		rep.Checkpoint, rep.Resume = "", ""
		runFacts(c, &rep)
		return rep
	}
	if err := c.Load(); err != nil {
		return fail(err)
	}
	rep.Notes = c.Meta.Notes
	if c.Result.Status != "" && c.Result.Status != "ok" {
		rep.Status, rep.Reason = NoResult, fmt.Sprintf("no reference result (status %s): %s", c.Result.Status, c.Result.Note)
		return rep
	}
	if len(c.Result.Steps) == 0 {
		rep.Status, rep.Reason = NoResult, "no reference result: result.json records no steps"
		return rep
	}
	js := c.DSConfig()
	if len(js) == 0 || string(js) == "null" {
		return fail(unsupported("result.json has no ds_config (a plain PyTorch run?) and %s gives none", MetaFile))
	}
	ver := c.Result.DeepSpeedVersion
	if ver == "" {
		ver = c.Meta.DeepSpeedVersion
	}
	v, ok := versions[strings.SplitN(ver, "+", 2)[0]]
	if !ok {
		return fail(unsupported("DeepSpeed version %q: dszero follows 0.14.5 and 0.19.5 (set deepspeed_version in %s)", ver, MetaFile))
	}
	rep.World = c.WorldSize()
	if rep.World < 1 {
		return fail(fmt.Errorf("no per-rank micro-step losses to tell the world size from; set world_size in %s", MetaFile))
	}
	plan, err := dsconfig.Load(string(js), dsconfig.Options{WorldSize: rep.World, DeepSpeedVersion: ver})
	if err != nil {
		return fail(unsupported("ds_config: %v", err))
	}
	rep.Stage, rep.DType, rep.Steps = plan.Zero.Stage, plan.Precision.DType.String(), len(c.Result.Steps)
	if _, err := zero.CheckPlan(plan); err != nil {
		return fail(unsupported("%v", err))
	}
	desc, err := readModel(&c)
	if err != nil {
		return fail(err)
	}
	a, err := buildArch(&c, desc)
	if err != nil {
		return fail(err)
	}
	rep.Model = fmt.Sprintf("%s %d params", a.name, a.layout.Numel)
	init, err := a.loadData(&c, desc)
	if err != nil {
		return fail(err)
	}
	tol := c.Meta.Tolerances.or(Defaults(plan.Precision.DType))
	rec, recStep, err := c.record()
	if err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "dszero-conformance-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	got, err := a.train(plan, rep.Steps, v, init, ckpt{dir: dir, saveAt: saveSteps(rep.Steps, recStep)})
	if err != nil {
		return fail(fmt.Errorf("dszero's run: %w", err))
	}
	rep.Warnings = got.Warns
	compareSteps(&rep, c.Result.Steps, got, tol)

	var problems []string
	var want []float32
	file, err := c.finalWeights()
	if err == nil {
		want = make([]float32, a.layout.Numel)
		if err = model.ReadLayout(file, &a.layout, want); err == nil {
			rep.WeightsFile = file
			var mask []bool
			if mask, err = a.noiseDriven(init, noiseCheckOf(plan, c.Result.Steps, tol)); err == nil {
				rep.Weights, rep.Noise = splitWeights(got.Final, want, init, mask, &a.layout, tol)
			}
		} else {
			want = nil
		}
	}
	if err != nil {
		problems = append(problems, "final weights: "+err.Error())
	}
	problems = append(problems, checkLayout(&rep, rec, recStep, dir)...)
	problems = append(problems, a.checkResume(&rep, &c, plan, v, init, dir, got, want, tol)...)
	for _, m := range []struct {
		name string
		m    Metric
	}{{"losses", rep.Loss}, {"micro-step losses", rep.Micro}, {"grad norms", rep.GradNorm}, {"lr", rep.LR}, {"loss scale", rep.LossScale}, {"final weights", rep.Weights}} {
		if !m.m.OK() {
			what, d := "|Δ|", m.m.MaxAbs
			if m.m.Rel {
				what, d = "rel Δ", m.m.MaxRel
			}
			problems = append(problems, fmt.Sprintf("%s: max %s %.2e > %.0e", m.name, what, d, m.m.Tol))
		}
	}
	if n := rep.Noise; n != nil && !n.OK() {
		name, m := n.Worst()
		problems = append(problems, fmt.Sprintf("noise-driven weights (%d elements): %s: max |Δ| %.2e > %.2e (the tolerance + twice the smaller run's largest move of its %d)", n.N(), name, m.MaxAbs, m.Tol, m.N))
	}
	if rep.Loss.N == 0 {
		problems = append(problems, "no step losses compared")
	}
	if len(problems) > 0 {
		rep.Status, rep.Reason = Fail, strings.Join(problems, "; ")
	} else {
		rep.Status = Pass
	}
	return rep
}

// compareSteps fills the per-step metrics.
func compareSteps(rep *Report, ref []StepRecord, got trained, tol Tolerances) {
	rep.Loss = Metric{Tol: tol.LossRel, Rel: true}
	rep.Micro = Metric{Tol: tol.LossRel, Rel: true}
	rep.GradNorm = Metric{Tol: tol.GradNormRel, Rel: true}
	rep.LR = Metric{Tol: tol.LRRel, Rel: true}
	rep.LossScale = Metric{Tol: 0}
	for s, w := range ref {
		rep.Loss.add(got.Loss[s], w.Loss)
		for r, ms := range w.Micro {
			for m, l := range ms {
				if r < len(got.Micro[s]) && m < len(got.Micro[s][r]) {
					rep.Micro.add(float64(got.Micro[s][r][m]), l)
				} else {
					rep.Micro.add(math.NaN(), l) // the reference has micro-steps dszero did not run
				}
			}
		}
		st := got.Stats[s]
		if w.GradNorm != nil && !st.Skipped {
			rep.GradNorm.add(st.GradNorm, *w.GradNorm)
		}
		rep.LR.add(st.LR, w.LRUsed)
		if w.LossScale != nil {
			rep.LossScale.add(st.LossScale, *w.LossScale)
		}
	}
}
