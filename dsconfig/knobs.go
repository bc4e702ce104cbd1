package dsconfig

import (
	"fmt"
	"math"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// This file plans the knobs outside the ZeRO engine that a training loop
// acts on: the FLOPS profiler, the comms logger, progressive layer drop
// and the sequence-length curriculum (legacy curriculum_learning or the
// data_efficiency block's curriculum part).

// FlopsProfiler is the flops_profiler block (DeepSpeed reads it key by
// key, deepspeed/profiling/config.py). Enabling it also turns on
// wall_clock_breakdown, as in DeepSpeed.
type FlopsProfiler struct {
	Enabled            bool
	RecomputeFwdFactor float64
	ProfileStep        int64 // optimizer steps finished before the profiled one (default 1)
	ModuleDepth        int64 // -1: every depth
	TopModules         int64
	Detailed           bool
	OutputFile         string // "": stdout
}

// CommsLogger is the comms_logger block (deepspeed/comm/config.py).
type CommsLogger struct {
	Enabled bool
	Verbose bool
	ProfAll bool     // log every op (default true)
	ProfOps []string // the ops logged when ProfAll is false
	Debug   bool
}

// ProgressiveLayerDrop is the progressive_layer_drop block: while
// training, the engine hands the model theta(t) = (1−θ)·exp(−γ·t) + θ,
// t the optimizer steps finished, and the model keeps each transformer
// layer with a probability that falls from 1 at the input towards theta(t)
// at the output (see package model/gpt).
type ProgressiveLayerDrop struct {
	Enabled bool
	Theta   float64 // the keep probability theta(t) tends to
	Gamma   float64 // how fast it gets there
}

// Curriculum is a sequence-length curriculum: each optimizer step trains
// on the first Difficulty(step) tokens of every sample. It comes from the
// legacy curriculum_learning block (curriculum_type "seqlen") or from
// data_efficiency.data_sampling.curriculum_learning with a single-cluster
// seqlen metric.
type Curriculum struct {
	Enabled bool
	Source  string // the JSON path of the block it came from
	// MinDifficulty and MaxDifficulty are the sequence lengths the
	// schedule goes between.
	MinDifficulty, MaxDifficulty int64
	ScheduleType                 string // "fixed_linear", "fixed_root" or "fixed_discrete"
	TotalCurriculumStep          int64  // fixed_linear, fixed_root
	DifficultyStep               int64  // fixed_linear, fixed_root: the length is a multiple of it
	RootDegree                   float64
	Difficulty                   []int64 // fixed_discrete
	MaxStep                      []int64 // fixed_discrete: len(Difficulty)−1 entries
}

// readKnobs reads the blocks of the knobs above.
func (c *compiler) readKnobs(top *block) {
	c.readFlopsProfiler(top)
	c.readCommsLogger(top)
	c.readPLD(top)
	c.readCurriculum(top)
}

func (c *compiler) readFlopsProfiler(top *block) {
	fp := top.get("flops_profiler").Object(scalarBlock)
	p := &c.plan.FlopsProfiler
	p.Enabled = fp.get("enabled").Bool(false)
	p.RecomputeFwdFactor = fp.get("recompute_fwd_factor").Float(0)
	// DeepSpeed takes a negative profile_step and then never profiles,
	// and slices its tables oddly for a negative top_modules: refused.
	p.ProfileStep = fp.get("profile_step").Int(1, 0)
	p.ModuleDepth = fp.get("module_depth").Int(-1, -1)
	p.TopModules = fp.get("top_modules").Int(1, 0)
	p.Detailed = fp.get("detailed").Bool(true)
	p.OutputFile = fp.get("output_file").String("")
	fp.finish()
	if p.RecomputeFwdFactor < 0 {
		c.s.errorf(c.at("flops_profiler.recompute_fwd_factor"), "flops_profiler.recompute_fwd_factor", "use a share in [0, 1]",
			"must be ≥ 0 (the share of the forward that activation checkpointing recomputes), got %g", p.RecomputeFwdFactor)
	}
	if p.Enabled {
		c.plan.WallClockBreakdown = true // DeepSpeed: the profiler forces wall_clock_breakdown
	}
}

// commsOps are the op names comms_logger.prof_ops may list (the
// deepspeed.comm functions it times).
var commsOps = []string{"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
	"broadcast", "barrier", "all_to_all_single", "send", "recv", "isend", "irecv", "reduce", "gather", "scatter", "all_reduce_coalesced"}

func (c *compiler) readCommsLogger(top *block) {
	cl := top.get("comms_logger").Object(pydanticBlock)
	l := &c.plan.CommsLogger
	l.Enabled = cl.get("enabled").Bool(false)
	l.ProfAll = cl.get("prof_all").Bool(true)
	l.Verbose = cl.get("verbose").Bool(false)
	l.Debug = cl.get("debug").Bool(false)
	ops := cl.get("prof_ops")
	switch v := ops.v; {
	case v == nil || v.Kind == lenient.Null:
		ops.record(nil)
	case v.Kind != lenient.Array:
		ops.errorf(`write a list of op names, e.g. ["all_reduce"]`, "must be a list of strings, got %s", describe(v))
	default:
		for _, e := range v.Elems {
			if e.Kind != lenient.String {
				c.s.errorf(e, "comms_logger.prof_ops", `write op names as strings, e.g. ["all_reduce"]`, "must be a list of strings, got %s in it", describe(e))
				continue
			}
			if !contains(commsOps, e.Str) {
				c.s.warnf(e, "comms_logger.prof_ops", didYouMean(e.Str, commsOps, "the ops are "+quoteAll(commsOps)),
					"%s is not a collective dszero issues, so it is never logged", quoteStr(e.Str))
			}
			l.ProfOps = append(l.ProfOps, e.Str)
		}
		ops.record(l.ProfOps)
	}
	cl.finish()
}

func (c *compiler) readPLD(top *block) {
	b := top.get("progressive_layer_drop").Object(scalarBlock)
	p := &c.plan.ProgressiveLayerDrop
	p.Enabled = b.get("enabled").Bool(false)
	if !b.present() {
		return
	}
	// DeepSpeed's engine reads pld_params()["theta"] and ["gamma"]: a
	// missing key is a KeyError at deepspeed.initialize.
	for _, k := range []string{"theta", "gamma"} {
		if p.Enabled && c.at("progressive_layer_drop."+k) == nil {
			c.s.errorf(c.at("progressive_layer_drop"), "progressive_layer_drop."+k, fmt.Sprintf(`add "%s" (DeepSpeed's examples use theta 0.5, gamma 0.001)`, k),
				"progressive layer drop needs %s: DeepSpeed's engine reads it without a default and raises KeyError", k)
		}
	}
	p.Theta = b.get("theta").Float(1.0)
	p.Gamma = b.get("gamma").Float(0.001)
	b.finish()
	if !p.Enabled {
		return
	}
	if p.Theta <= 0 || p.Theta > 1 {
		c.s.errorf(c.at("progressive_layer_drop.theta"), "progressive_layer_drop.theta", "use a keep probability in (0, 1], e.g. 0.5",
			"is the keep probability the schedule tends to, so it must be in (0, 1], got %g", p.Theta)
	}
	if p.Gamma < 0 {
		c.s.errorf(c.at("progressive_layer_drop.gamma"), "progressive_layer_drop.gamma", "use a small positive rate, e.g. 0.001",
			"must be ≥ 0 (with a negative rate the keep probability grows without bound), got %g", p.Gamma)
	}
}

func (c *compiler) readCurriculum(top *block) {
	legacy := top.get("curriculum_learning").Object(scalarBlock)
	legacyOn := legacy.get("enabled").Bool(false)
	if legacy.present() && legacyOn {
		typ := legacy.get("curriculum_type")
		if typ.v == nil {
			c.s.errorf(c.at("curriculum_learning"), "curriculum_learning.curriculum_type", `add "curriculum_type": "seqlen"`,
				"DeepSpeed's engine reads curriculum_type in every forward without a default and raises KeyError")
		} else if t := typ.String(""); t != "seqlen" && t != "" {
			c.s.unsupportedf(typ.v, "curriculum_learning.curriculum_type", `use "seqlen"`,
				"curriculum_type %s: DeepSpeed's engine passes only a seqlen difficulty to the model; any other type needs the model's own code to read the difficulty", quoteStr(t))
		}
		c.readSchedule(legacy, "curriculum_learning")
	} else if legacy.present() {
		legacy.markUsed("curriculum_type", "min_difficulty", "max_difficulty", "schedule_type", "schedule_config")
	}
	legacy.finish()

	de := top.get("data_efficiency").Object(scalarBlock)
	if !de.present() {
		return
	}
	deOn := de.get("enabled").Bool(false)
	de.get("seed").Int(1234, -1<<62)
	ds := de.get("data_sampling").Object(scalarBlock)
	dsOn := ds.get("enabled").Bool(false)
	ds.get("num_epochs").Int(1000, 1)
	ds.get("num_workers").Int(0, 0)
	cl := ds.get("curriculum_learning").Object(scalarBlock)
	clOn := cl.get("enabled").Bool(false)
	cl.markUsed("data_cluster_path", "curriculum_metrics")
	dr := de.get("data_routing").Object(scalarBlock)
	drOn := dr.get("enabled").Bool(false)
	dr.markUsed("random_ltd")
	dr.finish()
	de.finish()
	ds.finish()
	cl.finish()
	if deOn && drOn && enabledIn(c.at("data_efficiency.data_routing.random_ltd")) {
		c.s.unsupportedf(c.at("data_efficiency.data_routing.random_ltd"), "data_efficiency.data_routing.random_ltd", "set random_ltd.enabled to false",
			"random layerwise token dropping (random-LTD) is not supported by dszero: it needs the model's layers replaced by DeepSpeed's RandomLayerTokenDrop wrappers")
	}
	if !(deOn && dsOn && clOn) {
		return
	}
	if legacyOn {
		c.s.errorf(c.at("data_efficiency.data_sampling.curriculum_learning.enabled"), "data_efficiency.data_sampling.curriculum_learning",
			"enable one curriculum: this block or the legacy curriculum_learning", "two sequence-length curricula are enabled (this and the legacy curriculum_learning block)")
		return
	}
	const at = "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics"
	metrics := c.at(at)
	if metrics == nil || metrics.Kind != lenient.Object || len(metrics.Members) == 0 {
		c.s.errorf(c.at("data_efficiency.data_sampling.curriculum_learning"), at, `add "curriculum_metrics": {"seqlen_truncate": {...}}`,
			"curriculum learning is enabled, so curriculum_metrics must be specified (DeepSpeed asserts it)")
		return
	}
	for _, m := range metrics.Members {
		path := at + "." + m.Key
		mb := c.newBlock(path, m.Value, scalarBlock)
		if m.Value.Kind != lenient.Object {
			c.s.errorf(m.Value, path, "write an object {...}", "must be an object, got %s", describe(m.Value))
			continue
		}
		clustering := mb.get("clustering_type").String("")
		mb.get("difficulty_type").String("")
		mb.markUsed("index_to_sample_path", "index_to_metric_path")
		if (m.Key != "seqlen" && m.Key != "seqlen_truncate") || clustering != "single_cluster" {
			c.s.unsupportedf(m.Value, path, `use a "seqlen_truncate" metric with "clustering_type": "single_cluster"`,
				"curriculum metric %s (clustering %s) samples by difficulty from the data analyzer's index files; dszero runs only the sequence-length truncation curriculum", quote(m.Key), quoteStr(clustering))
			mb.markUsed("min_difficulty", "max_difficulty", "schedule_type", "schedule_config")
			mb.finish()
			continue
		}
		if c.plan.Curriculum.Enabled {
			c.s.errorf(m.Value, path, "keep one seqlen metric", "a second sequence-length metric: the curriculum already follows %s", c.plan.Curriculum.Source)
			mb.markUsed("min_difficulty", "max_difficulty", "schedule_type", "schedule_config")
			mb.finish()
			continue
		}
		c.readSchedule(mb, path)
		mb.finish()
	}
}

// readSchedule reads the CurriculumScheduler keys of b (at path) into the
// plan's curriculum, with DeepSpeed's assertions as errors.
func (c *compiler) readSchedule(b *block, path string) {
	cu := Curriculum{Enabled: true, Source: path}
	ok := true
	need := func(key, fix string) bool {
		if c.at(path+"."+key) == nil {
			c.s.errorf(c.at(path), path+"."+key, fix, "curriculum learning requires %s (DeepSpeed's CurriculumScheduler asserts it)", key)
			ok = false
			return false
		}
		return true
	}
	need("min_difficulty", `add "min_difficulty", e.g. 8`)
	need("max_difficulty", "add \"max_difficulty\": the full sequence length")
	need("schedule_type", `add "schedule_type": "fixed_linear"`)
	cu.MinDifficulty = b.get("min_difficulty").Int(0, 1)
	cu.MaxDifficulty = b.get("max_difficulty").Int(0, 1)
	cu.ScheduleType = b.get("schedule_type").String("")
	sc := b.get("schedule_config").Object(scalarBlock)
	scPath := path + ".schedule_config"
	switch cu.ScheduleType {
	case "fixed_linear", "fixed_root":
		for _, k := range []string{"total_curriculum_step", "difficulty_step"} {
			if c.at(scPath+"."+k) == nil {
				c.s.errorf(c.at(path), scPath+"."+k, fmt.Sprintf("add %q to schedule_config", k),
					"curriculum learning with %s schedule requires the schedule_config %s (DeepSpeed asserts it)", cu.ScheduleType, k)
				ok = false
			}
		}
		cu.TotalCurriculumStep = sc.get("total_curriculum_step").Int(1, 1)
		cu.DifficultyStep = sc.get("difficulty_step").Int(1, 1)
		if cu.ScheduleType == "fixed_root" {
			if c.at(scPath+".root_degree") == nil {
				c.s.errorf(c.at(path), scPath+".root_degree", `add "root_degree", e.g. 2 (square root)`,
					"curriculum learning with fixed_root schedule requires the schedule_config root_degree (DeepSpeed asserts it)")
				ok = false
			}
			cu.RootDegree = sc.get("root_degree").Float(1)
			if cu.RootDegree <= 0 {
				c.s.errorf(c.at(scPath+".root_degree"), scPath+".root_degree", "use a positive degree, e.g. 2",
					"must be > 0, got %g", cu.RootDegree)
				ok = false
			}
		} else {
			cu.RootDegree = 1
		}
		if cu.DifficultyStep%8 != 0 {
			c.s.infof(c.at(scPath+".difficulty_step"), scPath+".difficulty_step",
				"DeepSpeed warns: with the seqlen metric difficulty_step should be a multiple of 8 (fp16) or 16 (int8) for Tensor Cores")
		}
	case "fixed_discrete":
		cu.Difficulty = c.intList(scPath + ".difficulty")
		cu.MaxStep = c.intList(scPath + ".max_step")
		sc.markUsed("difficulty", "max_step")
		switch {
		case cu.Difficulty == nil || cu.MaxStep == nil:
			ok = false
		case len(cu.MaxStep) == 0 || len(cu.Difficulty) != len(cu.MaxStep)+1:
			c.s.errorf(c.at(scPath), scPath, "give one difficulty more than max_step entries (the last difficulty holds for all later steps)",
				"fixed_discrete needs len(difficulty) = len(max_step) + 1 ≥ 2, got %d and %d", len(cu.Difficulty), len(cu.MaxStep))
			ok = false
		}
	case "custom":
		c.s.unsupportedf(c.at(path+".schedule_type"), path+".schedule_type", `use "fixed_linear", "fixed_root" or "fixed_discrete"`,
			"the custom schedule is a Python function set with set_custom_curriculum_learning_schedule; a config alone cannot give it")
		ok = false
	case "":
	default:
		c.s.errorf(c.at(path+".schedule_type"), path+".schedule_type", `use "fixed_linear", "fixed_root" or "fixed_discrete"`,
			"%s is not a curriculum schedule (DeepSpeed raises \"Unsupported curriculum schedule type\")", quoteStr(cu.ScheduleType))
		ok = false
	}
	sc.finish()
	if cu.MinDifficulty > cu.MaxDifficulty && cu.MaxDifficulty > 0 {
		c.s.errorf(c.at(path+".min_difficulty"), path+".min_difficulty", "make min_difficulty ≤ max_difficulty",
			"the curriculum goes from %d up to %d tokens: min_difficulty must not exceed max_difficulty", cu.MinDifficulty, cu.MaxDifficulty)
		ok = false
	}
	if ok {
		c.plan.Curriculum = cu
	}
}

// intList reads a list of positive integers at path, nil (with an error)
// when it is missing or not one.
func (c *compiler) intList(path string) []int64 {
	v := c.at(path)
	if v == nil {
		c.s.errorf(nil, path, "add it as a list of whole numbers", "curriculum learning with fixed_discrete schedule requires it (DeepSpeed asserts it)")
		return nil
	}
	if v.Kind != lenient.Array {
		c.s.errorf(v, path, "write a list of whole numbers", "must be a list, got %s", describe(v))
		return nil
	}
	out := []int64{}
	for _, e := range v.Elems {
		n, ok := e.Int64()
		if e.Kind != lenient.Number || !ok || n < 0 {
			c.s.errorf(e, path, "write whole numbers ≥ 0", "must be a list of whole numbers, got %s in it", describe(e))
			return nil
		}
		out = append(out, n)
	}
	c.rec.set(Setting{Path: path, Value: out, Source: FromFile, Line: v.Pos.Line, Col: v.Pos.Col})
	return out
}

// SeqLen is the curriculum's sequence length for the forward passes of
// the optimizer step that follows finished finished steps, as DeepSpeed
// computes it: the engine calls update_difficulty(global_steps + 1) before
// each forward, and the difficulty only moves while it is below
// max_difficulty. prev is the difficulty of the step before (MinDifficulty
// before the first).
//
//	fixed_linear, fixed_root (degree r, total S, step d):
//	    x = floor((s/S)^(1/r) · (max − min) + min);  x −= x mod d;  min(x, max)
//	fixed_discrete (difficulty D, max_step M):
//	    D[last] when s > M[last], else D[i] for the first i with s ≤ M[i]
//
// where s = finished + 1.
func (cu Curriculum) SeqLen(prev int64, finished int64) int64 {
	if prev >= cu.MaxDifficulty {
		return prev
	}
	s := finished + 1
	switch cu.ScheduleType {
	case "fixed_discrete":
		if s > cu.MaxStep[len(cu.MaxStep)-1] {
			return cu.Difficulty[len(cu.Difficulty)-1]
		}
		for i, m := range cu.MaxStep {
			if s <= m {
				return cu.Difficulty[i]
			}
		}
	case "fixed_linear", "fixed_root":
		return rootDifficulty(s, cu)
	}
	return prev
}

// rootDifficulty is CurriculumScheduler's __fixed_root_get_difficulty for
// step s. math.Pow special-cases the exponents 1 (fixed_linear) and 0.5
// (square root), where it is exact as C's pow is.
func rootDifficulty(s int64, cu Curriculum) int64 {
	frac := math.Pow(float64(s)/float64(cu.TotalCurriculumStep), 1.0/cu.RootDegree)
	next := int64(math.Floor(frac*float64(cu.MaxDifficulty-cu.MinDifficulty) + float64(cu.MinDifficulty)))
	if r := next % cu.DifficultyStep; r != 0 {
		next -= r
	}
	return min(next, cu.MaxDifficulty)
}

// ThetaFor is the theta DeepSpeed's engine hands the model in the forward
// passes of the optimizer step after finished finished steps.
// ProgressiveLayerDrop starts at 1 and, at each accumulation boundary
// before global_steps counts the step, sets theta(g) = (1−θ)·exp(−γ·g) + θ
// with g = global_steps; so the step after k finished steps sees
// theta(k−1), and the first step sees 1.
func (p ProgressiveLayerDrop) ThetaFor(finished int64) float64 {
	if finished <= 0 {
		return 1
	}
	return (1-p.Theta)*math.Exp(-p.Gamma*float64(finished-1)) + p.Theta
}
