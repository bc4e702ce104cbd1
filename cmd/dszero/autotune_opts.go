package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// tuneOptions are the ds_config "autotuning" keys (DeepSpeed 0.14.5's
// deepspeed/autotuning/config.py and constants.py), with its defaults.
type tuneOptions struct {
	Fast                      bool
	ResultsDir, ExpsDir       string
	Overwrite                 bool
	StartProfileStep          int
	EndProfileStep            int
	Metric                    string // "throughput", "latency" or "flops"
	TunerType                 string
	TunerEarlyStopping        int
	TunerNumTrials            int
	MaxTrainBatchSize         int // 0: none
	MinTrainBatchSize         int
	MaxMicroBatch, MinMicro   int // max/min_train_micro_batch_size_per_gpu
	NumTuningMicroBatchSizes  int
	MPSize                    int
	Stages                    []int // zero_optimization.stage: a stage, a list or "all"
	GradientAccumulationSteps int   // the user's, 1 when absent
}

// readTuneOptions reads the autotuning block and the stages of cfg. Every
// problem names its key.
func readTuneOptions(cfg map[string]any) (tuneOptions, error) {
	o := tuneOptions{Fast: true, ResultsDir: "autotuning_results", ExpsDir: "autotuning_exps", Overwrite: true,
		StartProfileStep: 3, EndProfileStep: 5, Metric: "throughput", TunerType: "gridsearch", TunerEarlyStopping: 5,
		TunerNumTrials: 50, MinTrainBatchSize: 1, MaxMicroBatch: 1024, MinMicro: 1, NumTuningMicroBatchSizes: 3, MPSize: 1}
	var errs []string
	bad := func(key, format string, a ...any) {
		errs = append(errs, "autotuning."+key+": "+fmt.Sprintf(format, a...))
	}
	at, _ := cfg["autotuning"].(map[string]any)
	if cfg["autotuning"] != nil && at == nil {
		return o, fmt.Errorf("autotuning: must be an object")
	}
	boolKey := func(key string, p *bool) {
		if v, ok := at[key]; ok && v != nil {
			b, ok := v.(bool)
			if !ok {
				bad(key, "must be true or false, got %v", v)
				return
			}
			*p = b
		}
	}
	intKey := func(key string, p *int, lo int) {
		if v, ok := at[key]; ok && v != nil {
			f, ok := v.(float64)
			if !ok || f != math.Trunc(f) || f < float64(lo) || f > math.MaxInt32 {
				bad(key, "must be a whole number ≥ %d, got %v", lo, v)
				return
			}
			*p = int(f)
		}
	}
	strKey := func(key string, p *string, allowed ...string) {
		if v, ok := at[key]; ok && v != nil {
			s, ok := v.(string)
			if !ok || len(allowed) > 0 && !slices.Contains(allowed, s) {
				bad(key, "must be one of %s, got %v", strings.Join(allowed, ", "), v)
				return
			}
			*p = s
		}
	}
	boolKey("fast", &o.Fast)
	boolKey("overwrite", &o.Overwrite)
	strKey("results_dir", &o.ResultsDir)
	strKey("exps_dir", &o.ExpsDir)
	intKey("start_profile_step", &o.StartProfileStep, 1)
	intKey("end_profile_step", &o.EndProfileStep, 1)
	strKey("metric", &o.Metric, "throughput", "latency", "flops")
	strKey("tuner_type", &o.TunerType, "gridsearch", "random", "model_based")
	intKey("tuner_early_stopping", &o.TunerEarlyStopping, 1)
	intKey("tuner_num_trials", &o.TunerNumTrials, 1)
	intKey("max_train_batch_size", &o.MaxTrainBatchSize, 1)
	intKey("min_train_batch_size", &o.MinTrainBatchSize, 1)
	intKey("max_train_micro_batch_size_per_gpu", &o.MaxMicroBatch, 1)
	intKey("min_train_micro_batch_size_per_gpu", &o.MinMicro, 1)
	intKey("num_tuning_micro_batch_sizes", &o.NumTuningMicroBatchSizes, 1)
	intKey("mp_size", &o.MPSize, 1)
	switch {
	case o.EndProfileStep <= o.StartProfileStep:
		bad("end_profile_step", "%d must be after start_profile_step %d: the metric is measured between them", o.EndProfileStep, o.StartProfileStep)
	case o.MPSize != 1:
		bad("mp_size", "%d: dszero has no model (tensor) parallelism; use 1", o.MPSize)
	case o.TunerType == "model_based":
		bad("tuner_type", `"model_based" fits DeepSpeed's XGBoost cost model to the trials; dszero runs "gridsearch" and "random"`)
	case o.MinMicro > o.MaxMicroBatch:
		bad("min_train_micro_batch_size_per_gpu", "%d exceeds max_train_micro_batch_size_per_gpu %d", o.MinMicro, o.MaxMicroBatch)
	}
	zo, _ := cfg["zero_optimization"].(map[string]any)
	switch st := zo["stage"].(type) {
	case nil:
		o.Stages = []int{0}
	case float64:
		o.Stages = []int{int(st)}
	case string:
		if st != "all" {
			errs = append(errs, fmt.Sprintf(`zero_optimization.stage: %q: want a stage 0-3, a list of them, or "all"`, st))
		}
		o.Stages = []int{0, 1, 2, 3}
	case []any:
		for _, s := range st {
			if f, ok := s.(float64); ok && f >= 0 && f <= 3 && f == math.Trunc(f) {
				o.Stages = append(o.Stages, int(f))
			} else if s == "all" {
				o.Stages = append(o.Stages, 0, 1, 2, 3)
			} else {
				errs = append(errs, fmt.Sprintf("zero_optimization.stage: %v in the list is not a stage 0-3", s))
			}
		}
	default:
		errs = append(errs, fmt.Sprintf(`zero_optimization.stage: want a stage 0-3, a list of them, or "all", got %v`, st))
	}
	slices.Sort(o.Stages)
	o.Stages = slices.Compact(o.Stages)
	for _, s := range o.Stages {
		if s < 0 || s > 3 {
			errs = append(errs, fmt.Sprintf("zero_optimization.stage: %d is not a stage 0-3", s))
		}
	}
	o.GradientAccumulationSteps = 1
	if g, ok := cfg["gradient_accumulation_steps"].(float64); ok && g >= 1 && g == math.Trunc(g) {
		o.GradientAccumulationSteps = int(g)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return o, nil
}

// microBatchList is DeepSpeed's get_tuning_micro_batch_size_list: the
// micro-batch sizes tried between min and max (raised to max/2), at a
// constant stride of (max−min)/n, leaving out a size whose accumulation
// steps would equal the largest size's, and always max; with the
// train batch per rank they share (max_train_batch_size per rank when
// given, else max × the user's accumulation steps).
func (o tuneOptions) microBatchList(minMBS, maxMBS, world int) ([]int, int) {
	if minMBS <= 0 || maxMBS <= 0 {
		return nil, 0
	}
	perGPU := maxMBS * o.GradientAccumulationSteps / o.MPSize
	if o.MaxTrainBatchSize > 0 {
		perGPU = o.MaxTrainBatchSize * o.MPSize / world
	}
	if minMBS < maxMBS/2 {
		minMBS = maxMBS / 2
	}
	stride := max((maxMBS-minMBS)/o.NumTuningMicroBatchSizes, 1)
	minGAS := perGPU / maxMBS
	var ls []int
	for mbs := minMBS; mbs < maxMBS; mbs += stride {
		if perGPU/mbs != minGAS {
			ls = append(ls, mbs)
		}
	}
	return append(ls, maxMBS), perGPU
}
