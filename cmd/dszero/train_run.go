package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/dszero/dszero/fsdpconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/train"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// trainResult is what a finished run reports.
type trainResult struct {
	first, last train.Record
	ran         int   // steps run (after a resumed checkpoint's)
	resumedAt   int64 // the step of the checkpoint resumed from; 0 without --load
	elapsed     time.Duration
	final       []float32 // the consolidated weights, with --save-model
	saveModel   string    // where they go
	modelFrom   string    // the checkpoints --save-model is written from (save_model.go); "": final
}

// train opens the outputs (--json-log, --cpuprofile), prints the run's
// header and trains, printing a line every steps_per_print steps.
func (j *trainJob) train() (trainResult, error) {
	f, plan := j.f, j.plan
	var res trainResult
	out := &stepSink{j: j, res: &res}
	var err error
	if out.log, err = j.openJSONLog(); err != nil {
		return res, err
	}
	j.header()
	out.bar = j.progressBar()
	if err := j.startCPUProfile(); err != nil {
		return res, err
	}
	batches, err := j.batches()
	if err != nil {
		return res, err
	}
	res.saveModel = j.consolidatedDir()
	if out.mon, err = j.openMonitors(); err != nil { // monitors.go
		return res, err
	}
	if f.trainer.outputDir != "" {
		if out.layout, err = newTrainerLayout(f.trainer, f.seed, j.steps, f.saveEvery, j.B, j.epochs(batches), j.stdout); err != nil {
			return res, err
		}
	}
	if _, ok := j.m.(checkpointSaver); ok && f.trainer.outputDir == "" && streamsSaveModel(res.saveModel, f.saveDir) {
		res.modelFrom = f.saveDir // streamed from the last checkpoint
	}
	out.start = time.Now()
	final, err := train.Run(train.Config{Layout: saveLayout(out.layout), Format: stateFormat(f, j.fp), Plan: plan, Model: j.m.Builder(), InitRange: j.m.InitRange(), Seed: f.seed, ReturnParams: res.saveModel != "" && res.modelFrom == "", Batches: batches, SeqLen: j.T, Steps: j.steps, Devices: j.devs, Comm: j.l.comm(), FastMath: f.fastMath, Workers: f.threads,
		Checkpoint: f.gradCkpt || plan.ActivationCheckpointing.Present || j.fp.ActivationCkpt, CPUCheckpoint: plan.ActivationCheckpointing.CPUCheckpointing,
		KeepAfterForward: j.fp.KeepAfterForward, WrapMinNumParams: j.fp.WrapMinNumParams,
		SaveDir: f.saveDir, SaveInterval: f.saveEvery, SaveAsync: f.saveAsync, LoadDir: f.loadDir, Timeout: f.commTimeout,
		OnCheckpoint: out.checkpoint,
		Warn:         func(msg string) { fmt.Fprintf(j.stderr, "dszero train: warning: %s\n", msg) }, Stdout: j.stdout},
		out.record)
	if out.bar != nil {
		out.bar.Finish()
	}
	res.final, res.elapsed = final, time.Since(out.start)
	return res, err
}

// openJSONLog opens --json-log (on the lead process only): nil without.
func (j *trainJob) openJSONLog() (*json.Encoder, error) {
	if j.f.jsonLog == "" || !j.l.lead() {
		return nil, nil
	}
	lf, err := os.Create(j.f.jsonLog)
	if err != nil {
		return nil, fmt.Errorf("--json-log: %w", err)
	}
	j.closers = append(j.closers, func() { lf.Close() })
	return json.NewEncoder(lf), nil
}

// header prints the run's first two lines: the config, model and data;
// the plan's summary, the batch, the steps and the matmul.
func (j *trainJob) header() {
	f, stdout, n := j.f, j.stdout, j.steps
	dname, dtokens := j.dataName()
	fmt.Fprintf(stdout, "dszero: %s | model %s (%s parameters) | data %s (%d tokens)\n", j.name, f.modelArg, paramCount(j.m.NumParams()), dname, dtokens)
	steps := plural(n, "step")
	if f.loadDir != "" {
		steps = fmt.Sprintf("to step %d, resuming", n)
	}
	fmt.Fprintf(stdout, "        %s | batch %d × %d tokens × %d accumulation | %s | matmul: %s\n",
		summary(j.plan), j.B, j.T, j.gas, steps, j.engine.Description())
}

// progressBar is a bar on a terminal; nil elsewhere (a log file, a pipe),
// where its \r frames would pile up and the step lines are the progress.
func (j *trainJob) progressBar() *progressbar.ProgressBar {
	if j.f.quiet || !isTerminal(j.stderr) {
		return nil
	}
	return progressbar.NewOptions(j.steps, progressbar.OptionSetWriter(j.stderr), progressbar.OptionSetDescription("training"),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}

// startCPUProfile starts --cpuprofile; close stops it.
func (j *trainJob) startCPUProfile() error {
	if j.f.cpuProfile == "" {
		return nil
	}
	pf, err := os.Create(j.f.cpuProfile)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	j.closers = append(j.closers, func() { pprof.StopCPUProfile(); pf.Close() })
	return nil
}

// consolidatedDir is where the consolidated final weights go: --save-model,
// else beside the checkpoints when FSDP's FULL_STATE_DICT or DeepSpeed's
// stage3_gather_16bit_weights_on_model_save asks for them; "" for none.
func (j *trainJob) consolidatedDir() string {
	f, plan := j.f, j.plan
	if f.saveModel == "" && f.saveDir != "" && (j.fp.StateDict == fsdpconfig.FullStateDict || plan.Zero.Stage == 3 && plan.Zero.Gather16BitWeightsOnModelSave) {
		return filepath.Join(f.saveDir, "consolidated")
	}
	return f.saveModel
}

// stepSink is where the lead's records and checkpoint events go while
// training: the Trainer's log history, the progress bar, the monitors,
// --json-log and a step line every steps_per_print steps.
type stepSink struct {
	j      *trainJob
	res    *trainResult
	log    *json.Encoder // --json-log; nil without
	bar    *progressbar.ProgressBar
	mon    *stepMonitor
	layout *trainerLayout // --output_dir's; nil without
	start  time.Time
}

// record takes one step's record (train.Run's onStep).
func (s *stepSink) record(r train.Record) error {
	res := s.res
	if s.layout != nil {
		s.layout.log(r)
	}
	if res.ran == 0 {
		res.first = r
	}
	res.last = r
	res.ran++
	if s.bar != nil {
		s.bar.Add(1)
	}
	if err := s.mon.write(r); err != nil {
		return err
	}
	if s.log != nil {
		if err := s.log.Encode(r); err != nil {
			return fmt.Errorf("--json-log: %w", err)
		}
	}
	if every := s.j.plan.StepsPerPrint; every > 0 && r.Step%every == 0 || res.ran == 1 || int(r.Step) == s.j.steps {
		if s.bar != nil {
			s.bar.Clear()
		}
		s.j.stepLine(r, time.Since(s.start), res.ran)
	}
	return nil
}

// checkpoint prints a checkpoint saved, or the one resumed from.
func (s *stepSink) checkpoint(ev train.CheckpointEvent) {
	if s.bar != nil {
		s.bar.Clear()
	}
	if !ev.Saved {
		s.res.resumedAt = ev.Step
		if s.bar != nil {
			s.bar.ChangeMax(max(0, s.j.steps-int(ev.Step)))
		}
		fmt.Fprintf(s.j.stdout, "resumed from %s (step %d)\n", ev.Path(), ev.Step)
		return
	}
	fmt.Fprintf(s.j.stdout, "saved %s (%s, %.2f s)\n", ev.Path(), mem.FormatBytes(dirSize(ev.Path())), ev.Elapsed.Seconds())
}

// stepLine is the line printed every steps_per_print steps, ran steps
// (of this run) and el after training started.
func (j *trainJob) stepLine(r train.Record, el time.Duration, ran int) {
	stdout := j.stdout
	left := time.Duration(float64(el) / float64(ran) * float64(j.steps-int(r.Step)))
	fmt.Fprintf(stdout, "step %5d/%d | loss %.4f | lr %.3e | loss scale %g | grad norm %.3f%s | %.0f tokens/s | peak %s%s | %s, %s left\n",
		r.Step, j.steps, r.Loss, r.LR, r.LossScale, r.GradNorm, skipped(r.Skipped), r.TokensPerS, mem.FormatBytes(r.Peak["total"]), maxRank(r, j.nproc),
		roundDuration(el), roundDuration(left))
	if b := r.Breakdown; b != nil {
		fmt.Fprintf(stdout, "      time (ms) | forward: %.1f | backward: %.1f | step: %.1f", b.ForwardMS, b.BackwardMS, b.StepMS)
		if b.Gathers > 0 {
			fmt.Fprintf(stdout, " | waited for all-gathers %.1f, reduce-scatters %.1f | %d units gathered, %d prefetched",
				b.GatherWaitMS, b.ReduceWaitMS, b.Gathers, b.Prefetched)
		}
		fmt.Fprintln(stdout)
		if len(b.SentBytes) > 0 {
			fmt.Fprintf(stdout, "      sent (rank 0) | %s\n", formatSent(b.SentBytes))
		}
	}
}

// report writes the consolidated weights (--save-model) and prints the
// summary: steps, losses, throughput and each tier's peak.
func (j *trainJob) report(res trainResult) error {
	stdout := j.stdout
	if res.saveModel != "" && j.l.lead() {
		var what string
		var err error
		if cs, ok := j.m.(checkpointSaver); ok && res.modelFrom != "" {
			what, err = cs.SaveModelFrom(res.saveModel, res.modelFrom)
		} else {
			what, err = j.m.SaveModel(res.saveModel, res.final)
		}
		if err != nil {
			return fmt.Errorf("--save-model: %w", err)
		}
		fmt.Fprintf(stdout, "consolidated weights written to %s (%s)\n", res.saveModel, what)
	}
	first, last, el := res.first, res.last, res.elapsed
	tokens := float64(res.ran*j.B*j.T*j.gas*j.nproc) / el.Seconds()
	switch {
	case res.ran == 0:
		fmt.Fprintf(stdout, "done: nothing to train: the checkpoint is at step %d and --steps %d is the total; give a larger --steps to train on\n", res.resumedAt, j.steps)
	case res.resumedAt > 0:
		which := fmt.Sprintf("steps %d to %d", first.Step, last.Step)
		if res.ran == 1 {
			which = fmt.Sprintf("step %d", last.Step)
		}
		fmt.Fprintf(stdout, "done: %s (%s) in %s, loss %.4f → %.4f, %.0f tokens/s overall\n", plural(res.ran, "step"), which, el.Round(time.Millisecond),
			first.Loss, last.Loss, tokens)
	default:
		fmt.Fprintf(stdout, "done: %s in %s, loss %.4f → %.4f, %.0f tokens/s overall\n", plural(res.ran, "step"), el.Round(time.Millisecond), first.Loss, last.Loss, tokens)
	}
	for i, a := range j.accts {
		r := j.ranks[i]
		if r > 0 && r < j.nproc-1 {
			continue // rank 0 and the last rank, whose partition holds the padding
		}
		s := a.Snapshot()
		who := ""
		if j.nproc > 1 {
			who = fmt.Sprintf(" (rank %d)", r)
		}
		for _, tier := range mem.Tiers() {
			if tier != mem.Device && s.PeakTotal[tier] == 0 {
				continue
			}
			var parts []string
			for _, c := range mem.Categories() {
				if v := s.PeakBytes(tier, c); v > 0 {
					parts = append(parts, fmt.Sprintf("%s %s", c, mem.FormatBytes(v)))
				}
			}
			what := map[mem.Tier]string{mem.Device: "device memory", mem.PinnedHost: "pinned host memory", mem.NVMe: "NVMe swap files"}[tier]
			fmt.Fprintf(stdout, "peak %s%s %s: %s\n", what, who, mem.FormatBytes(s.PeakTotal[tier]), strings.Join(parts, ", "))
		}
	}
	return nil
}

// maxRank is ", max over ranks X" when there are several ranks.
func maxRank(r train.Record, nproc int) string {
	if nproc == 1 {
		return ""
	}
	return fmt.Sprintf(" (max over %d ranks %s)", nproc, mem.FormatBytes(r.PeakMax["total"]))
}

func skipped(b bool) string {
	if b {
		return " (overflow: step skipped)"
	}
	return ""
}

// paramCount writes a parameter count in K, M or B.
func paramCount(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// dirSize is the bytes of the files under dir (0 when it cannot be read:
// the size is for the reader, the checkpoint's manifest is the record).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// roundDuration keeps a duration to the precision a reader wants: 850ms,
// 12.3s, 4m51s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// isTerminal reports whether w is a terminal (a progress bar can redraw
// itself there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// plural is "1 step", "2 steps".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
