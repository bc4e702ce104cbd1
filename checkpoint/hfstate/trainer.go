package hfstate

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The Trainer's names (transformers/trainer.py, trainer_utils.py).
const (
	CheckpointPrefix = "checkpoint"         // PREFIX_CHECKPOINT_DIR
	TrainerStateName = "trainer_state.json" // TRAINER_STATE_NAME
	SchedulerName    = "scheduler.pt"       // SCHEDULER_NAME
	OptimizerName    = "optimizer.pt"       // OPTIMIZER_NAME (no FSDP, no DeepSpeed)
	ScalerName       = "scaler.pt"          // SCALER_NAME
	TrainingArgsName = "training_args.bin"  // torch.save(TrainingArguments): a pickled Python object dszero does not write
)

// CheckpointDir is the folder the Trainer saves step's checkpoint in:
// OUTPUT_DIR/checkpoint-STEP.
func CheckpointDir(outputDir string, step int64) string {
	return filepath.Join(outputDir, fmt.Sprintf("%s-%d", CheckpointPrefix, step))
}

// RNGStateName is the file the Trainer's _save_rng_state writes for rank
// of world: rng_state.pth alone, rng_state_RANK.pth when distributed.
func RNGStateName(world, rank int) string {
	if world <= 1 {
		return "rng_state.pth"
	}
	return fmt.Sprintf("rng_state_%d.pth", rank)
}

// TrainerState is trainer_state.json, the Trainer's TrainerState dataclass
// (transformers 4.5x/5.x). Fields the Trainer leaves None are nil.
type TrainerState struct {
	Epoch               *float64 // fractional epoch at the save (None before training)
	GlobalStep          int64
	MaxSteps            int64
	LoggingSteps        int64 // absolute, after compute_steps (500 by default)
	EvalSteps           int64
	SaveSteps           int64
	TrainBatchSize      *int64
	NumTrainEpochs      int64
	NumInputTokensSeen  int64
	TotalFlos           float64
	LogHistory          []map[string]any // each: {"loss": 2.31, "grad_norm": ..., "learning_rate": ..., "epoch": ..., "step": 10}
	BestMetric          *float64
	BestGlobalStep      *int64
	BestModelCheckpoint *string
	IsLocalProcessZero  bool
	IsWorldProcessZero  bool
	IsHyperParamSearch  bool
	TrialName           *string
	TrialParams         map[string]any
	StatefulCallbacks   map[string]any // {"TrainerControl": {"args": {...}, "attributes": {}}, ...}
	// Other keys a newer Trainer writes, kept so that a read and a write
	// give them back.
	Extra map[string]any
}

// NewTrainerState is a TrainerState as the Trainer starts one: the steps
// at their defaults (500), process-zero flags set, and the
// TrainerControl callback state it saves with every checkpoint.
func NewTrainerState() *TrainerState {
	return &TrainerState{
		LoggingSteps: 500, EvalSteps: 500, SaveSteps: 500,
		IsLocalProcessZero: true, IsWorldProcessZero: true,
		StatefulCallbacks: map[string]any{"TrainerControl": TrainerControlState(false)},
	}
}

// TrainerControlState is TrainerControl.state() as _save_checkpoint
// records it: should_save is true, since the save is under way.
func TrainerControlState(trainingStop bool) map[string]any {
	return map[string]any{
		"args": map[string]any{
			"should_epoch_stop": false, "should_evaluate": false, "should_log": false,
			"should_save": true, "should_training_stop": trainingStop,
		},
		"attributes": map[string]any{},
	}
}

func ptr[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// MarshalJSON writes the state as TrainerState.save_to_json does: sorted
// keys, two-space indent, Python's number spellings, a final newline.
func (s *TrainerState) MarshalJSON() ([]byte, error) {
	hist := make([]any, len(s.LogHistory))
	for i, e := range s.LogHistory {
		hist[i] = e
	}
	m := map[string]any{}
	for k, v := range s.Extra {
		m[k] = v
	}
	var trial any
	if s.TrialParams != nil {
		trial = s.TrialParams
	}
	cb := s.StatefulCallbacks
	if cb == nil {
		cb = map[string]any{}
	}
	for k, v := range map[string]any{
		"epoch": ptr(s.Epoch), "global_step": s.GlobalStep, "max_steps": s.MaxSteps,
		"logging_steps": s.LoggingSteps, "eval_steps": s.EvalSteps, "save_steps": s.SaveSteps,
		"train_batch_size": ptr(s.TrainBatchSize), "num_train_epochs": s.NumTrainEpochs,
		"num_input_tokens_seen": s.NumInputTokensSeen, "total_flos": s.TotalFlos, "log_history": hist,
		"best_metric": ptr(s.BestMetric), "best_global_step": ptr(s.BestGlobalStep),
		"best_model_checkpoint": ptr(s.BestModelCheckpoint), "is_local_process_zero": s.IsLocalProcessZero,
		"is_world_process_zero": s.IsWorldProcessZero, "is_hyper_param_search": s.IsHyperParamSearch,
		"trial_name": ptr(s.TrialName), "trial_params": trial, "stateful_callbacks": cb,
	} {
		m[k] = v
	}
	b, err := marshalPy(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseTrainerState reads trainer_state.json as TrainerState.load_from_json
// does (json.loads, so NaN and Infinity read too). name is the file errors
// name.
func ParseTrainerState(data []byte, name string) (*TrainerState, error) {
	v, err := unmarshalPy(data)
	if err != nil {
		return nil, fmt.Errorf("hfstate: %s: %w", name, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("hfstate: %s: not a JSON object", name)
	}
	s := &TrainerState{Extra: map[string]any{}}
	var errs []string
	field := func(k string) (any, bool) {
		v, ok := m[k]
		delete(m, k)
		return v, ok && v != nil
	}
	intOf := func(k string, dst *int64) {
		if v, ok := field(k); ok {
			switch n := v.(type) {
			case int64:
				*dst = n
			case float64: // logging_steps as a ratio never survives compute_steps; a float here is whole
				if n != math.Trunc(n) {
					errs = append(errs, fmt.Sprintf("%s is %v, not an integer", k, n))
				}
				*dst = int64(n)
			default:
				errs = append(errs, fmt.Sprintf("%s is a %T", k, v))
			}
		}
	}
	floatOf := func(k string) *float64 {
		v, ok := field(k)
		if !ok {
			return nil
		}
		switch n := v.(type) {
		case float64:
			return &n
		case int64:
			f := float64(n)
			return &f
		}
		errs = append(errs, fmt.Sprintf("%s is a %T, not a number", k, v))
		return nil
	}
	optInt := func(k string) *int64 {
		if _, ok := m[k]; !ok || m[k] == nil {
			delete(m, k)
			return nil
		}
		var n int64
		intOf(k, &n)
		return &n
	}
	boolOf := func(k string, dst *bool, def bool) {
		*dst = def
		if v, ok := field(k); ok {
			if b, ok := v.(bool); ok {
				*dst = b
			} else {
				errs = append(errs, fmt.Sprintf("%s is a %T, not a bool", k, v))
			}
		}
	}
	strOf := func(k string) *string {
		v, ok := field(k)
		if !ok {
			return nil
		}
		if str, ok := v.(string); ok {
			return &str
		}
		errs = append(errs, fmt.Sprintf("%s is a %T, not a string", k, v))
		return nil
	}
	s.Epoch = floatOf("epoch")
	intOf("global_step", &s.GlobalStep)
	intOf("max_steps", &s.MaxSteps)
	s.LoggingSteps, s.EvalSteps, s.SaveSteps = 500, 500, 500
	intOf("logging_steps", &s.LoggingSteps)
	intOf("eval_steps", &s.EvalSteps)
	intOf("save_steps", &s.SaveSteps)
	s.TrainBatchSize = optInt("train_batch_size")
	intOf("num_train_epochs", &s.NumTrainEpochs)
	intOf("num_input_tokens_seen", &s.NumInputTokensSeen)
	if f := floatOf("total_flos"); f != nil {
		s.TotalFlos = *f
	}
	if v, ok := field("log_history"); ok {
		l, ok := v.([]any)
		if !ok {
			errs = append(errs, fmt.Sprintf("log_history is a %T, not a list", v))
		}
		for i, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Sprintf("log_history[%d] is a %T, not an object", i, e))
				continue
			}
			s.LogHistory = append(s.LogHistory, em)
		}
	}
	s.BestMetric = floatOf("best_metric")
	s.BestGlobalStep = optInt("best_global_step")
	s.BestModelCheckpoint = strOf("best_model_checkpoint")
	boolOf("is_local_process_zero", &s.IsLocalProcessZero, true)
	boolOf("is_world_process_zero", &s.IsWorldProcessZero, true)
	boolOf("is_hyper_param_search", &s.IsHyperParamSearch, false)
	s.TrialName = strOf("trial_name")
	if v, ok := field("trial_params"); ok {
		s.TrialParams, _ = v.(map[string]any)
	}
	if v, ok := field("stateful_callbacks"); ok {
		s.StatefulCallbacks, _ = v.(map[string]any)
	}
	for k, v := range m {
		s.Extra[k] = v
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return nil, fmt.Errorf("hfstate: %s: %s", name, strings.Join(errs, "; "))
	}
	return s, nil
}

// ReadTrainerState reads dir/trainer_state.json.
func ReadTrainerState(dir string) (*TrainerState, error) {
	path := filepath.Join(dir, TrainerStateName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfstate: %w", err)
	}
	return ParseTrainerState(b, path)
}

// Checkpoint is one checkpoint-N folder of an output directory.
type Checkpoint struct {
	Path string
	Step int64
}

// reCheckpoint is get_last_checkpoint's pattern: the whole name, so
// "checkpoint-12.tmp" or "checkpoint-12-old" are not checkpoints.
var reCheckpoint = regexp.MustCompile(`^` + CheckpointPrefix + `-(\d+)$`)

// ListCheckpoints returns the checkpoint-N folders of outputDir, oldest
// (smallest N) first, as get_last_checkpoint and _sorted_checkpoints
// (numerically) see them; files of that name are not checkpoints. A
// missing outputDir has none.
func ListCheckpoints(outputDir string) ([]Checkpoint, error) {
	ents, err := os.ReadDir(outputDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hfstate: %w", err)
	}
	var out []Checkpoint
	for _, e := range ents {
		m := reCheckpoint.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			continue // more digits than a step count has
		}
		out = append(out, Checkpoint{Path: filepath.Join(outputDir, e.Name()), Step: n})
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return compareInt(a.Step, b.Step) })
	return out, nil
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LastCheckpoint is get_last_checkpoint: the checkpoint-N of outputDir
// with the largest N; ok is false when there is none.
func LastCheckpoint(outputDir string) (c Checkpoint, ok bool, err error) {
	l, err := ListCheckpoints(outputDir)
	if err != nil || len(l) == 0 {
		return Checkpoint{}, false, err
	}
	return l[len(l)-1], true, nil
}

// ResolveResume turns --resume_from_checkpoint into the folder to resume
// from: "" (or "false") is none; "true" is the newest checkpoint-N of
// outputDir, an error when it has none (Trainer.train's "No valid
// checkpoint found in output directory"); anything else is a path, which
// must be a folder holding trainer_state.json.
func ResolveResume(outputDir, arg string) (string, error) {
	switch strings.ToLower(arg) {
	case "", "false":
		return "", nil
	case "true":
		c, ok, err := LastCheckpoint(outputDir)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("hfstate: --resume_from_checkpoint true: no valid checkpoint found in output directory (%s): it has no checkpoint-N folder; pass a checkpoint's path, or start without --resume_from_checkpoint", outputDir)
		}
		return c.Path, nil
	}
	st, err := os.Stat(arg)
	if err != nil {
		return "", fmt.Errorf("hfstate: --resume_from_checkpoint %s: %w", arg, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("hfstate: --resume_from_checkpoint %s: not a folder (want a checkpoint-N folder)", arg)
	}
	if _, err := os.Stat(filepath.Join(arg, TrainerStateName)); err != nil {
		return "", fmt.Errorf("hfstate: --resume_from_checkpoint %s: no %s in it: not a Trainer checkpoint, or one whose save did not finish", arg, TrainerStateName)
	}
	return arg, nil
}

// RotationPlan is _rotate_checkpoints' choice: which checkpoint-N folders
// of outputDir to delete so that at most limit remain (limit <= 0 keeps
// all). The newest are kept; best, when it names one of them (the
// Trainer's best_model_checkpoint), is kept too: it is moved, in the
// oldest-first order, to just before the newest, and with limit 1 and a
// best that is not the newest, two are kept so that the run can still
// resume. Checkpoints are ordered by N (the Trainer orders by mtime and
// falls back to N when the times are under a second apart; for one run's
// checkpoints, written in step order, both orders agree).
func RotationPlan(outputDir string, limit int, best string) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	l, err := ListCheckpoints(outputDir)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(l))
	for i, c := range l {
		paths[i] = c.Path
	}
	if len(paths) <= limit {
		return nil, nil
	}
	if best != "" {
		best = filepath.Clean(best)
		if i := slices.Index(paths, best); i >= 0 {
			for j := i; j < len(paths)-2; j++ {
				paths[j], paths[j+1] = paths[j+1], paths[j]
			}
		}
		if limit == 1 && paths[len(paths)-1] != best {
			limit = 2
		}
	}
	return paths[:max(0, len(paths)-limit)], nil
}

// Rotate deletes the checkpoints RotationPlan names and returns them.
func Rotate(outputDir string, limit int, best string) ([]string, error) {
	del, err := RotationPlan(outputDir, limit, best)
	if err != nil {
		return nil, err
	}
	for _, p := range del {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("hfstate: rotating checkpoints (save_total_limit %d): %w", limit, err)
		}
	}
	return del, nil
}

// StagingDir is where a checkpoint of step is assembled before Commit
// renames it to CheckpointDir: a name neither get_last_checkpoint nor
// _sorted_checkpoints' glob (checkpoint-*) matches, so that a crash
// mid-save leaves no folder that looks like a checkpoint.
func StagingDir(outputDir string, step int64) string {
	return filepath.Join(outputDir, fmt.Sprintf(".tmp-%s-%d", CheckpointPrefix, step))
}

// Commit renames the staged checkpoint of step into place and syncs
// outputDir. A checkpoint of that step already there (a rerun) is moved
// aside first and removed after, so that there is always one whole
// checkpoint-N.
func Commit(outputDir string, step int64) (string, error) {
	staged, final := StagingDir(outputDir, step), CheckpointDir(outputDir, step)
	old := filepath.Join(outputDir, fmt.Sprintf(".old-%s-%d", CheckpointPrefix, step))
	if _, err := os.Stat(final); err == nil {
		os.RemoveAll(old)
		if err := os.Rename(final, old); err != nil {
			return "", fmt.Errorf("hfstate: commit %s: %w", final, err)
		}
	}
	if err := os.Rename(staged, final); err != nil {
		return "", fmt.Errorf("hfstate: commit %s: %w", final, err)
	}
	if d, err := os.Open(outputDir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return "", fmt.Errorf("hfstate: commit %s: sync %s: %w", final, outputDir, err)
		}
	}
	if err := os.RemoveAll(old); err != nil {
		return "", fmt.Errorf("hfstate: commit %s: remove the replaced checkpoint: %w", final, err)
	}
	return final, nil
}

// WriteTrainerState writes dir/trainer_state.json (through a temporary
// file and a rename).
func WriteTrainerState(dir string, s *TrainerState) error {
	b, err := s.MarshalJSON()
	if err != nil {
		return fmt.Errorf("hfstate: %s: %w", filepath.Join(dir, TrainerStateName), err)
	}
	return writeFile(filepath.Join(dir, TrainerStateName), b)
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	fd, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = fd.Write(b)
		if err == nil {
			err = fd.Sync()
		}
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hfstate: write %s: %w", path, err)
	}
	return nil
}
