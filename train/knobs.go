package train

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/nprand"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/monitor/commslog"
	"github.com/dszero/dszero/profiler"
)

// This file runs the plan's knobs that act around each micro-step, each
// where DeepSpeed's engine runs it:
//
//   - the sequence-length curriculum truncates every sample of the step's
//     micro-batches to the curriculum's length (the engine passes
//     curriculum_seqlen to the model's forward, which keeps
//     tokens[:, :seqlen] and the labels alike);
//   - progressive layer drop draws, before each forward, which blocks
//     the model runs (the engine passes pld_theta to the forward);
//   - the FLOPS profiler (rank 0) profiles the forwards of optimizer step
//     profile_step + 1 and prints after each of its micro-steps;
//   - the comms logger records the engine's collectives and rank 0 prints
//     the summary after the last step.

// layerDropper is a model that can skip and scale its transformer blocks
// (gpt.Model).
type layerDropper interface {
	DropLayers() int
	SetLayerDrop(keep []bool, keepProb []float32) error
}

// knobs is one rank's state for the knobs above.
type knobs struct {
	cfg  *Config
	rank int
	out  io.Writer

	// curriculum
	seqlen int64       // the current difficulty (DeepSpeed's current_difficulty)
	short  model.Batch // the truncated micro-batch, reused

	// progressive layer drop
	dropper     layerDropper
	np          *nprand.RandomState // numpy's global generator, np.random.seed(seed)
	npDraws     int64               // choices drawn from np since the seed
	drawStep    int64               // the step and micro-step of the next draw
	drawMicro   int
	keep        []bool
	keepProb    []float32
	lastDropped int // blocks skipped in the last forward (for tests)

	prof   *profiler.Profiler // rank 0, flops_profiler enabled
	active bool               // the current micro-step is profiled

	comms *commslog.Logger
}

// newKnobs checks the knobs against the model and builds rank's state.
func newKnobs(cfg *Config, rank int) (*knobs, error) {
	p := cfg.Plan
	k := &knobs{cfg: cfg, rank: rank, out: cfg.Stdout}
	if k.out == nil {
		k.out = os.Stdout
	}
	if cu := p.Curriculum; cu.Enabled {
		if cfg.Model.MaxSeq() == 0 {
			return nil, fmt.Errorf("%s: a sequence-length curriculum needs a model of token sequences", cu.Source)
		}
		k.seqlen = cu.MinDifficulty
	}
	if p.ProgressiveLayerDrop.Enabled {
		// DeepSpeed's example models draw with numpy's global generator,
		// which the training script seeds alike on every rank
		// (np.random.seed(seed)), so every rank drops the same blocks;
		// these draw the same numbers from the same seed. numpy's state is
		// not in DeepSpeed's checkpoints: a resumed run here skips the
		// draws of the forwards before the checkpoint, so it drops what
		// the uninterrupted run drops.
		if cfg.Seed > 1<<32-1 {
			return nil, fmt.Errorf("progressive_layer_drop: seed %d: the layer drop draws from numpy's np.random.seed(seed), which takes 0 to 2^32-1; use a smaller --seed", cfg.Seed)
		}
		k.np = nprand.New(uint32(cfg.Seed))
		k.drawStep = -1
	}
	if fp := p.FlopsProfiler; fp.Enabled && rank == 0 {
		counter, ok := cfg.Model.(model.FlopCounter)
		if !ok {
			return nil, fmt.Errorf("flops_profiler.enabled: the model %T cannot count its FLOPs; set it to false", cfg.Model)
		}
		opts := profiler.Options{ProfileStep: int(fp.ProfileStep), ModuleDepth: int(fp.ModuleDepth), TopModules: int(fp.TopModules),
			Detailed: fp.Detailed, OutputFile: fp.OutputFile, RecomputeFwdFactor: fp.RecomputeFwdFactor}
		var err error
		if k.prof, err = profiler.New(counter, opts, time.Now, nil); err != nil {
			return nil, fmt.Errorf("flops_profiler: %w", err)
		}
	}
	if cl := p.CommsLogger; cl.Enabled {
		var verbose io.Writer
		if cl.Verbose && rank == 0 {
			verbose = k.out
		}
		var err error
		if k.comms, err = commslog.New(commslog.Options{WorldSize: p.WorldSize, Verbose: verbose, Rank: rank}); err != nil {
			return nil, fmt.Errorf("comms_logger: %w", err)
		}
	}
	return k, nil
}

// engineComm is the communicator the ZeRO engine issues on: c, logged
// when the comms logger is on.
func (k *knobs) engineComm(c comm.Comm) comm.Comm {
	if k.comms == nil {
		return c
	}
	var ops []string
	if cl := k.cfg.Plan.CommsLogger; !cl.ProfAll {
		ops = append([]string{}, cl.ProfOps...)
	}
	return commslog.Wrap(c, k.comms, ops, time.Now)
}

// hooks wraps the model's unit hooks with the profiler's timing.
func (k *knobs) hooks(h model.UnitHooks) model.UnitHooks {
	if k.prof == nil {
		return h
	}
	return k.prof.Hooks(h)
}

// attach checks the built model against the knobs that need its help.
func (k *knobs) attach(m model.Model) error {
	if !k.cfg.Plan.ProgressiveLayerDrop.Enabled {
		return nil
	}
	d, ok := m.(layerDropper)
	if !ok {
		return fmt.Errorf("progressive_layer_drop.enabled: the model %T has no transformer layers to drop; set it to false", m)
	}
	k.dropper = d
	k.keep, k.keepProb = make([]bool, d.DropLayers()), make([]float32, d.DropLayers())
	return nil
}

// beforeForward prepares micro-step micro of the step after finished
// finished optimizer steps and returns the batch to run: b, or its
// truncation to the curriculum's length.
func (k *knobs) beforeForward(finished int64, b *model.Batch) (model.Batch, error) {
	p := k.cfg.Plan
	run := *b
	if cu := p.Curriculum; cu.Enabled {
		k.seqlen = cu.SeqLen(k.seqlen, finished)
		T := len(b.Tokens) / b.B
		if k.seqlen < 1 {
			return run, fmt.Errorf("%s: the curriculum's length after %d steps is %d tokens (DeepSpeed rounds it down to a multiple of difficulty_step); raise min_difficulty to at least difficulty_step",
				cu.Source, finished, k.seqlen)
		}
		if L := int(k.seqlen); L < T {
			run = k.truncate(b, T, L)
		}
	}
	if k.dropper != nil {
		if finished != k.drawStep {
			k.drawStep, k.drawMicro = finished, 0
		}
		// One forward per micro-step, L choices per forward: the forwards
		// before this one drew (finished·gas + micro)·L.
		L, gas := int64(len(k.keep)), p.Batch.GradientAccumulationSteps
		k.seekDraws((finished*gas + int64(k.drawMicro)) * L)
		k.drawMicro++
		k.drawLayers(p.ProgressiveLayerDrop.ThetaFor(finished))
		if err := k.dropper.SetLayerDrop(k.keep, k.keepProb); err != nil {
			return run, err
		}
	}
	k.active = k.prof != nil && k.prof.Active(int(finished))
	if k.active {
		T := 1
		if run.B > 0 && len(run.Tokens) > 0 {
			T = len(run.Tokens) / run.B
		}
		// T is the rank's: under Ulysses its T/sp tokens (seqpar.go).
		if err := k.prof.Start(model.FlopShape{Batch: run.B, Seq: T, RowPositions: run.Positions != nil, SeqParallel: int(k.cfg.Plan.SequenceParallelSize)}); err != nil {
			return run, fmt.Errorf("flops profiler: %w", err)
		}
	}
	return run, nil
}

// truncate keeps the first L of the T tokens of every row of b (and of
// its targets and positions).
func (k *knobs) truncate(b *model.Batch, T, L int) model.Batch {
	s := &k.short
	s.B, s.LossDenom, s.X, s.Y = b.B, b.LossDenom, b.X, b.Y
	cut := func(dst, src []int32) []int32 {
		if src == nil {
			return nil
		}
		dst = dst[:0]
		for r := 0; r < b.B; r++ {
			dst = append(dst, src[r*T:r*T+L]...)
		}
		return dst
	}
	s.Tokens, s.Targets, s.Positions = cut(s.Tokens, b.Tokens), cut(s.Targets, b.Targets), cut(s.Positions, b.Positions)
	return *s
}

// drawLayers is the layer drop of DeepSpeedExamples' PLD encoder
// (bing_bert modelingpreln_layerdrop.py BertEncoder.forward) for theta:
//
//	drop_prob = 1 - theta; step = drop_prob / L; p = 1.0
//	for each layer: action = np.random.choice([1, 0], p=[p, 1 - p])
//	                p = p - step
//	                layer(hidden_states, attention_mask, action, p)
//
// so block i runs with probability p_i = 1 − i·step and, when it runs,
// divides its branches by p_{i+1}, the probability already lowered for
// the next block (float32(p): torch's tensor / Python float).
func (k *knobs) drawLayers(theta float64) {
	L := len(k.keep)
	step := (1 - theta) / float64(L)
	p := 1.0
	k.lastDropped = 0
	for i := range k.keep {
		k.keep[i] = k.np.ChooseFirst(p)
		k.npDraws++
		p -= step
		k.keepProb[i] = float32(p)
		if !k.keep[i] {
			k.lastDropped++
		}
	}
}

// seekDraws puts numpy's generator where it stands after n choices from
// the seed: it is there already when the forwards run in order; after a
// resume it starts from the seed and skips the draws of the forwards
// before the checkpoint.
func (k *knobs) seekDraws(n int64) {
	if n == k.npDraws {
		return
	}
	if n < k.npDraws {
		k.np.Seed(uint32(k.cfg.Seed))
		k.npDraws = 0
	}
	for ; k.npDraws < n; k.npDraws++ {
		k.np.RandomSample()
	}
}

// afterForward ends the forward's profile.
func (k *knobs) afterForward() error {
	if !k.active {
		return nil
	}
	if err := k.prof.Stop(); err != nil {
		return fmt.Errorf("flops profiler: %w", err)
	}
	return nil
}

// afterStep prints the profile after a profiled micro-step's engine.step
// call: label is the optimizer steps finished after it, bd the window's
// timers so far.
func (k *knobs) afterStep(label int64, bd *Breakdown, world int) error {
	if !k.active {
		return nil
	}
	// DeepSpeed prints the engine's dp_world_size: world/sp under Ulysses.
	e := &profiler.Engine{WorldSize: world, DataParallel: int(k.cfg.Plan.DataParallelSize()), ModelParallel: 1, MicroBatch: int(k.cfg.Plan.Batch.TrainMicroBatchSizePerGPU),
		Fwd: bd.ForwardMS / 1000, Bwd: bd.BackwardMS / 1000, Step: bd.StepMS / 1000}
	if err := k.prof.Print(k.out, int(label), e); err != nil {
		return fmt.Errorf("flops profiler: %w", err)
	}
	return nil
}

// done prints rank 0's comms summary, where a DeepSpeed script calls
// deepspeed.comm.log_summary() after training.
func (k *knobs) done() error {
	if k.comms == nil || k.rank != 0 {
		return nil
	}
	if err := k.comms.WriteSummary(k.out); err != nil {
		return fmt.Errorf("comms_logger: %w", err)
	}
	return nil
}
