package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/checkpoint/hfstate"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/fsdpconfig"
	"github.com/dszero/dszero/train"
)

// The Trainer's checkpoints. --output_dir (HF's name) saves as the
// Trainer does with DeepSpeed: OUTPUT_DIR/checkpoint-N every --save_steps
// and after the last step, each holding DeepSpeed's global_stepN/ and
// latest, the Trainer's trainer_state.json and each rank's
// dszero_rng_state_R.pth; --save_total_limit keeps the newest folders;
// --resume_from_checkpoint true resumes from the newest checkpoint-N (a
// path, from that folder). --save (DeepSpeed's name) keeps DeepSpeed's
// own layout, SAVE/global_stepN and SAVE/latest.

// trainerOpts are the Trainer's checkpoint flags.
type trainerOpts struct {
	outputDir    string // --output_dir
	totalLimit   int    // --save_total_limit (0: keep all)
	loggingSteps int    // --logging_steps
	resumeState  string // the checkpoint-N resumed from, when it is a Trainer's
}

// trainerFlags registers --output_dir, --save_total_limit and
// --logging_steps.
func trainerFlags(fs *flag.FlagSet) *trainerOpts {
	o := &trainerOpts{loggingSteps: 500}
	fs.StringVar(&o.outputDir, "output_dir", "", "HF Trainer: write checkpoints as the Trainer does, DIR/checkpoint-N (DeepSpeed's global_stepN inside, trainer_state.json beside), after the last step and every --save_steps")
	intAtLeast(fs, &o.totalLimit, "save_total_limit", 0, "folders", "HF Trainer: keep only the newest N checkpoint-N folders of --output_dir (default: all)")
	intAtLeast(fs, &o.loggingSteps, "logging_steps", 1, "steps", "HF Trainer: steps between the log_history entries of trainer_state.json")
	return o
}

// resolve applies the Trainer's flags to f once parsed: --output_dir
// becomes the save directory, and --resume_from_checkpoint (resume) the
// checkpoint to load. saveSet says whether --save was given.
func (o *trainerOpts) resolve(f *trainFlags, saveSet bool, resume string) error {
	if o.outputDir != "" {
		if saveSet {
			return usagef("--save %s (DeepSpeed's layout, global_stepN) and --output_dir %s (the Trainer's, checkpoint-N) are two ways to save; give one", f.saveDir, o.outputDir)
		}
		f.saveDir = o.outputDir
	} else if o.totalLimit > 0 {
		return usagef("--save_total_limit %d rotates the Trainer's checkpoint-N folders; give --output_dir (with --save, DeepSpeed's layout keeps every checkpoint)", o.totalLimit)
	}
	switch {
	case resume == "" || resume == "false" || resume == "False":
		return nil
	case resume == "true" || resume == "True":
		if f.saveDir == "" {
			return usagef("--resume_from_checkpoint true resumes from the latest checkpoint in --output_dir (or --save); give that directory")
		}
		if o.outputDir == "" {
			resume = f.saveDir // DeepSpeed's layout: its latest
			break
		}
		p, err := hfstate.ResolveResume(o.outputDir, "true")
		if err != nil {
			return usagef("%v", err)
		}
		resume, o.resumeState = p, p
	default:
		if _, err := os.Stat(filepath.Join(resume, hfstate.TrainerStateName)); err == nil {
			o.resumeState = resume
		}
	}
	if f.loadDir != "" && f.loadDir != resume {
		return usagef("--load %s and --resume_from_checkpoint %s name two checkpoints; give one", f.loadDir, resume)
	}
	f.loadDir = resume
	return nil
}

// trainerLayout is train.SaveLayout for --output_dir: each save is
// assembled in hfstate.StagingDir, completed with trainer_state.json and
// renamed to checkpoint-N, then the oldest folders beyond
// --save_total_limit are deleted.
type trainerLayout struct {
	out   string
	limit int
	seed  uint64
	say   io.Writer // the run's output (rank 0's)
	// state is rank 0's TrainerState: the log history grows in log, which
	// runs on rank 0's goroutine, as Commit does.
	state   *hfstate.TrainerState
	epochOf func(step int64) float64
	// the losses since the last log_history entry
	lossSum float64
	losses  int
}

// newTrainerLayout starts the TrainerState of a run of maxSteps steps,
// from the checkpoint resumed from when there is one.
func newTrainerLayout(o *trainerOpts, seed uint64, maxSteps, saveSteps, microBatch int, epochOf func(int64) float64, say io.Writer) (*trainerLayout, error) {
	l := &trainerLayout{out: o.outputDir, limit: o.totalLimit, seed: seed, say: say, epochOf: epochOf, state: hfstate.NewTrainerState()}
	if o.resumeState != "" {
		st, err := hfstate.ReadTrainerState(o.resumeState)
		if err != nil {
			return nil, fmt.Errorf("--resume_from_checkpoint %s: %w", o.resumeState, err)
		}
		l.state = st
	}
	st := l.state
	st.MaxSteps, st.LoggingSteps = int64(maxSteps), int64(o.loggingSteps)
	if saveSteps > 0 {
		st.SaveSteps = int64(saveSteps)
	}
	mb := int64(microBatch)
	st.TrainBatchSize = &mb
	if e := epochOf(int64(maxSteps)); e > 0 {
		st.NumTrainEpochs = int64(math.Ceil(e))
	}
	return l, nil
}

// log adds step r to the log history every --logging_steps steps, as the
// Trainer's _maybe_log_save_evaluate does: the mean loss since the last
// entry rounded to 4 digits, the gradient norm, the learning rate, the
// epoch and the step.
func (l *trainerLayout) log(r train.Record) {
	l.lossSum += float64(r.Loss)
	l.losses++
	if l.state.LoggingSteps <= 0 || r.Step%l.state.LoggingSteps != 0 {
		return
	}
	loss := math.Round(l.lossSum/float64(l.losses)*1e4) / 1e4
	l.lossSum, l.losses = 0, 0
	l.state.LogHistory = append(l.state.LogHistory, map[string]any{
		"loss": loss, "grad_norm": float64(r.GradNorm), "learning_rate": r.LR, "epoch": l.epochOf(r.Step), "step": r.Step,
	})
}

func (l *trainerLayout) Dir(step int64) string { return hfstate.StagingDir(l.out, step) }

func (l *trainerLayout) Rank(dir string, step int64, rank int) error {
	return hfstate.WriteRNG(dir, rank, hfstate.RNGState{Seed: l.seed, Step: step})
}

func (l *trainerLayout) Commit(dir string, step int64) (string, error) {
	st := l.state
	st.GlobalStep = step
	e := l.epochOf(step)
	st.Epoch = &e
	// The log history holds what was logged up to this step: a run
	// resumed from an earlier checkpoint drops the entries after it.
	kept := st.LogHistory[:0]
	for _, h := range st.LogHistory {
		if s, ok := logStep(h); !ok || s <= step {
			kept = append(kept, h)
		}
	}
	st.LogHistory = kept
	if st.StatefulCallbacks == nil {
		st.StatefulCallbacks = map[string]any{}
	}
	st.StatefulCallbacks["TrainerControl"] = hfstate.TrainerControlState(step >= st.MaxSteps)
	if err := hfstate.WriteTrainerState(dir, st); err != nil {
		return "", err
	}
	final, err := hfstate.Commit(l.out, step)
	if err != nil {
		return "", err
	}
	gone, err := hfstate.Rotate(l.out, l.limit, "")
	for _, p := range gone {
		fmt.Fprintf(l.say, "deleted older checkpoint %s (--save_total_limit %d)\n", p, l.limit)
	}
	return final, err
}

// logStep is a log_history entry's step (JSON gives an int or a float).
func logStep(h map[string]any) (int64, bool) {
	switch s := h["step"].(type) {
	case int64:
		return s, true
	case float64:
		return int64(s), true
	case int:
		return int64(s), true
	}
	return 0, false
}

// saveLayout is l as a train.SaveLayout: nil (DeepSpeed's layout) when l is.
func saveLayout(l *trainerLayout) train.SaveLayout {
	if l == nil {
		return nil
	}
	return l
}

// saveFlag names the flag that set the save directory.
func (f *trainFlags) saveFlag() string {
	if f.trainer != nil && f.trainer.outputDir != "" {
		return "--output_dir"
	}
	return "--save"
}

// stateFormat is what each save writes: with --output_dir and an FSDP
// setup, Accelerate's state dicts of its state_dict_type, as the Trainer
// saves under FSDP (LOCAL_STATE_DICT, which dszero does not write, keeps
// DeepSpeed's per-rank files); otherwise DeepSpeed's files.
func stateFormat(f *trainFlags, fp fsdpconfig.Plan) train.StateFormat {
	if f.trainer.outputDir == "" {
		return train.DeepSpeedFiles
	}
	switch fp.StateDict {
	case fsdpconfig.ShardedStateDict:
		return train.Sharded
	case fsdpconfig.FullStateDict:
		return train.Full
	}
	return train.DeepSpeedFiles
}

// explainCheckpoints is config explain's Checkpoints section: the files a
// run of plan p writes with --save and with --output_dir.
func explainCheckpoints(w io.Writer, p dsconfig.Plan) {
	stage, dtype := p.Zero.Stage, p.Precision.DType
	var files []string
	for r := range min(max(p.WorldSize, 1), 2) {
		m, o := checkpoint.FileNames(stage, r, dtype)
		for _, f := range []string{m, o} {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	more := ""
	if p.WorldSize > 2 {
		more = ", … for each rank"
	}
	fmt.Fprintf(w, "\nCheckpoints\n")
	fmt.Fprintf(w, "  --save DIR: DeepSpeed's layout, DIR/global_stepN/ (%s%s) and DIR/latest\n", strings.Join(files, ", "), more)
	fmt.Fprintf(w, "  --output_dir DIR: the Trainer's, DIR/checkpoint-N/ holding those files, trainer_state.json and each rank's dszero_rng_state_R.pth\n")
	if stage == 3 && p.Zero.Gather16BitWeightsOnModelSave {
		fmt.Fprintf(w, "  stage3_gather_16bit_weights_on_model_save: the consolidated weights also go to DIR/consolidated (model.safetensors)\n")
	}
}
