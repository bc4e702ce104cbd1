package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero"
)

// The checkpoint checks. The harness saves at step 5 and after the last
// step, describes the last checkpoint (checkpoint.json) and resumes a
// second run from step 5 (result.json's resume_from_step5). dszero's run
// of the case saves at the same steps; then:
//
//   - layout: dszero's last checkpoint has every file the record lists,
//     with its keys, types, dtypes, shapes and scalar values (counters,
//     learning rates, loss-scaler state), and no other file
//     (checkpoint.Record.Match). DeepSpeed's copy of its zero_to_fp32.py
//     script is the one file dszero does not write (`dszero export` does
//     its work).
//   - resume: a second run loads dszero's step-5 checkpoint and trains to
//     the end; its losses and final weights must equal the uninterrupted
//     run's bit for bit. When the case holds DeepSpeed's own step-5
//     checkpoint (ckpt/global_step5), a third run resumes from it, and
//     steps 6… and the final weights are compared with the reference
//     within the case's tolerances.

// resumeStep is the step the harness resumes from (resume_from_step5).
const resumeStep = 5

// Files the checks read in a case directory.
const (
	CheckpointRecordFile = "checkpoint.json"
	DeepSpeedCheckpoint  = "ckpt" // DeepSpeed's own checkpoint directory
)

// notWritten are the recorded files dszero never writes.
var notWritten = []string{"zero_to_fp32.py"}

// record reads the case's checkpoint.json and the step its described tag
// was saved at; nil when the case has none.
func (c *Case) record() (*checkpoint.Record, int, error) {
	rec, err := checkpoint.ReadRecord(filepath.Join(c.Dir, CheckpointRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var step int
	if _, err := fmt.Sscanf(rec.Tag, "global_step%d", &step); err != nil || step < 1 {
		return nil, 0, fmt.Errorf("%s: described_tag %q is not global_step<N>", filepath.Join(c.Dir, CheckpointRecordFile), rec.Tag)
	}
	return rec, step, nil
}

// saveSteps are the steps dszero's run saves at: the resume step and the
// recorded checkpoint's.
func saveSteps(steps, recorded int) []int {
	var at []int
	if resumeStep < steps {
		at = append(at, resumeStep)
	}
	if recorded > 0 && recorded <= steps && recorded != resumeStep {
		at = append(at, recorded)
	}
	return at
}

// checkLayout fills rep.Checkpoint and returns the problems found.
func checkLayout(rep *Report, rec *checkpoint.Record, step int, dir string) []string {
	if rec == nil {
		rep.Checkpoint = "not recorded"
		return nil
	}
	if step > rep.Steps {
		rep.Checkpoint = fmt.Sprintf("not checked: the record is of step %d, the run has %d", step, rep.Steps)
		return nil
	}
	m, err := rec.Match(dir, checkpoint.Tag(int64(step)), checkpoint.MatchOptions{Skip: notWritten})
	if err != nil {
		rep.Checkpoint = "error: " + err.Error()
		return []string{"checkpoint layout: " + err.Error()}
	}
	if m.OK() {
		rep.Checkpoint = fmt.Sprintf("match: %d files", m.Files)
		return nil
	}
	var what []string
	if len(m.Missing) > 0 {
		what = append(what, fmt.Sprintf("missing %v", m.Missing))
	}
	if len(m.Extra) > 0 {
		what = append(what, fmt.Sprintf("not in DeepSpeed's %v", m.Extra))
	}
	what = append(what, m.Diffs...)
	rep.Checkpoint = fmt.Sprintf("differs (%d)", len(what))
	return []string{"checkpoint layout differs from DeepSpeed's: " + strings.Join(what, "; ")}
}

// recordedResume says whether the reference recorded a resume from step 5
// that reproduced its uninterrupted run.
func (c *Case) recordedResume() string {
	var r struct {
		Status string `json:"status"`
	}
	if len(c.Result.Resume) == 0 || json.Unmarshal(c.Result.Resume, &r) != nil || r.Status == "" {
		return "not recorded"
	}
	return r.Status
}

// checkResume runs the resumes, fills rep.Resume (and the DeepSpeed
// resume's metrics) and returns the problems found. whole is the
// uninterrupted run, saved in dir; want the reference's final weights
// (nil if unknown).
func (a *arch) checkResume(rep *Report, c *Case, plan dsconfig.Plan, v zero.Version, init []float32, dir string, whole trained, want []float32, tol Tolerances) []string {
	if rep.Steps <= resumeStep {
		rep.Resume = fmt.Sprintf("not checked: the run has %d steps", rep.Steps)
		return nil
	}
	tag := checkpoint.Tag(resumeStep)
	var problems, parts []string
	ref, err := c.resumedRun()
	if err != nil {
		return []string{err.Error()}
	}
	refSteps := c.Result.Steps[resumeStep:] // what a resume reproduces
	if ref != nil {
		// The reference's resume departs from its uninterrupted run by
		// design: a resumed run must reproduce DeepSpeed's resumed run.
		if len(ref.Steps) != rep.Steps-resumeStep {
			return []string{fmt.Sprintf("result.json: resume_from_step5 holds %d steps, the run resumes for %d", len(ref.Steps), rep.Steps-resumeStep)}
		}
		refSteps = ref.Steps
		if want, err = a.resumedWeights(c, ref); err != nil {
			problems = append(problems, err.Error())
		}
	}
	again, err := a.train(plan, rep.Steps, v, init, ckpt{loadDir: dir, loadTag: tag})
	switch {
	case err != nil:
		problems = append(problems, "resume from dszero's step 5: "+err.Error())
		parts = append(parts, "error")
	case ref != nil:
		part, bad := resumeMetrics(again, refSteps, want, tol, nil, nil)
		parts = append(parts, "dszero's: "+part)
		for _, b := range bad {
			problems = append(problems, "resume from dszero's step 5 vs DeepSpeed's resumed run: "+b)
		}
	default:
		if d := sameRun(whole, again); d != "" {
			problems = append(problems, "resume from dszero's step 5 is not bit-exact: "+d)
			parts = append(parts, "differs")
		} else {
			parts = append(parts, "bit-exact")
		}
	}
	dsDir := filepath.Join(c.Dir, DeepSpeedCheckpoint)
	if _, err := os.Stat(filepath.Join(dsDir, tag)); err == nil {
		got, err := a.train(plan, rep.Steps, v, init, ckpt{loadDir: dsDir, loadTag: tag})
		if err != nil {
			problems = append(problems, "resume from DeepSpeed's step-5 checkpoint: "+err.Error())
			parts = append(parts, "DeepSpeed's: error")
		} else if ref != nil {
			rep.ResumeLoss, rep.ResumeWeights = &Metric{}, &Metric{}
			part, bad := resumeMetrics(got, refSteps, want, tol, rep.ResumeLoss, rep.ResumeWeights)
			parts = append(parts, "DeepSpeed's: "+part)
			for _, b := range bad {
				problems = append(problems, "resume from DeepSpeed's step-5 checkpoint vs DeepSpeed's resumed run: "+b)
			}
		} else {
			loss := Metric{Tol: tol.LossRel, Rel: true}
			for s, w := range refSteps {
				loss.add(got.Loss[s], w.Loss)
			}
			rep.ResumeLoss = &loss
			part := fmt.Sprintf("DeepSpeed's: loss %.1e", loss.MaxRel)
			if !loss.OK() {
				problems = append(problems, fmt.Sprintf("resume from DeepSpeed's step-5 checkpoint: losses max rel Δ %.2e > %.0e", loss.MaxRel, loss.Tol))
			}
			if want != nil {
				w := weightMetric(got.Final, want, tol)
				rep.ResumeWeights = &w
				part += fmt.Sprintf(", weights %.1e", w.MaxAbs)
				if !w.OK() {
					problems = append(problems, fmt.Sprintf("resume from DeepSpeed's step-5 checkpoint: final weights max |Δ| %.2e > %.0e", w.MaxAbs, w.Tol))
				}
			}
			parts = append(parts, part)
		}
	}
	if r := c.recordedResume(); r != "ok" {
		parts = append(parts, "DeepSpeed's own resume: "+r)
	}
	rep.Resume = strings.Join(parts, "; ")
	return problems
}

// resumedRun is the reference's own resumed run, which result.json's
// resume_from_step5 holds (gen_case.py --keep-resumed) where the
// optimizer's resume departs from the uninterrupted run by design: the
// 1-bit optimizers' load_state_dict drops their compression errors, and in
// fp32 their first step after a load is an initialization pass again.
type resumedRun struct {
	Steps     []StepRecord `json:"steps"`
	FinalFile string       `json:"final_fp32_file"` // beside result.json
}

// resumedRun is the recorded resumed run; nil when the case has none.
func (c *Case) resumedRun() (*resumedRun, error) {
	if len(c.Result.Resume) == 0 {
		return nil, nil
	}
	var r resumedRun
	if err := json.Unmarshal(c.Result.Resume, &r); err != nil {
		return nil, fmt.Errorf("%s: resume_from_step5: %w", filepath.Join(c.Dir, "result.json"), err)
	}
	if len(r.Steps) == 0 {
		return nil, nil
	}
	if r.FinalFile == "" || strings.ContainsAny(r.FinalFile, `/\`) {
		return nil, fmt.Errorf("%s: resume_from_step5.final_fp32_file %q: the resumed run's final weights, a file beside result.json (gen_case.py --keep-resumed writes it)", filepath.Join(c.Dir, "result.json"), r.FinalFile)
	}
	return &r, nil
}

// resumedWeights reads the final weights of the reference's resumed run.
func (a *arch) resumedWeights(c *Case, r *resumedRun) ([]float32, error) {
	file := filepath.Join(c.Dir, r.FinalFile)
	w := make([]float32, a.layout.Numel)
	if err := model.ReadLayout(file, &a.layout, w); err != nil {
		return nil, fmt.Errorf("the resumed run's final weights: %w", err)
	}
	return w, nil
}

// resumeMetrics compares a resumed run's losses (steps 6…) and final
// weights (when want is known) with the reference's, into loss and w when
// given: a summary and the problems found.
func resumeMetrics(got trained, ref []StepRecord, want []float32, tol Tolerances, loss, w *Metric) (string, []string) {
	if loss == nil {
		loss = &Metric{}
	}
	*loss = Metric{Tol: tol.LossRel, Rel: true}
	for s, r := range ref {
		loss.add(got.Loss[s], r.Loss)
	}
	part := fmt.Sprintf("loss %.1e", loss.MaxRel)
	var bad []string
	if !loss.OK() {
		bad = append(bad, fmt.Sprintf("losses max rel Δ %.2e > %.0e", loss.MaxRel, loss.Tol))
	}
	if want != nil {
		m := weightMetric(got.Final, want, tol)
		if w != nil {
			*w = m
		}
		part += fmt.Sprintf(", weights %.1e", m.MaxAbs)
		if !m.OK() {
			bad = append(bad, fmt.Sprintf("final weights max |Δ| %.2e > %.0e", m.MaxAbs, m.Tol))
		}
	}
	return part, bad
}

// sameRun compares a resumed run with the uninterrupted one over the
// steps they share, bit for bit: "" when equal, else the first difference.
func sameRun(whole, resumed trained) string {
	off := resumed.From - whole.From
	for s := range resumed.Loss {
		if math.Float64bits(resumed.Loss[s]) != math.Float64bits(whole.Loss[s+off]) {
			return fmt.Sprintf("step %d loss %v, uninterrupted %v", resumed.From+s+1, resumed.Loss[s], whole.Loss[s+off])
		}
		if a, b := resumed.Stats[s], whole.Stats[s+off]; a.GradNorm != b.GradNorm || a.LR != b.LR || a.LossScale != b.LossScale || a.Skipped != b.Skipped {
			return fmt.Sprintf("step %d: grad norm, lr, loss scale or skip differ (%+v, uninterrupted %+v)", resumed.From+s+1, a, b)
		}
	}
	for i := range resumed.Final {
		if math.Float32bits(resumed.Final[i]) != math.Float32bits(whole.Final[i]) {
			return fmt.Sprintf("final weight %d %v, uninterrupted %v", i, resumed.Final[i], whole.Final[i])
		}
	}
	return ""
}

// weightMetric compares final weights: the largest absolute difference,
// and ‖Δ‖₂/‖want‖₂ as MaxRel.
func weightMetric(got, want []float32, tol Tolerances) Metric {
	m := Metric{Tol: tol.WeightsAbs}
	var d2, w2 float64
	for i := range want {
		m.add(float64(got[i]), float64(want[i]))
		d := float64(got[i]) - float64(want[i])
		d2, w2 = d2+d*d, w2+float64(want[i])*float64(want[i])
	}
	if w2 > 0 {
		m.MaxRel = math.Sqrt(d2 / w2)
	}
	return m
}
