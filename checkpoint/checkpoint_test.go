package checkpoint_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
)

const mlpRef = "../model/mlp/testdata/"

// result is what a (possibly resumed) run produced.
type result struct {
	losses []float64 // per step, the mean over ranks and micro-steps
	final  []float32 // full fp32 master after the last step
	states []zero.State
}

// runMLP trains the TinyMLP on plan.WorldSize ranks for steps [from, to):
// loading dir's latest checkpoint first when load is set, and saving to
// dir after the last step when save is set.
func runMLP(t *testing.T, plan dsconfig.Plan, d ztest.MLPData, from, to int, dir string, load, save bool) result {
	t.Helper()
	return runMLPVersion(t, zero.Version(0), plan, d, from, to, dir, load, save)
}

// runMLPVersion is runMLP following DeepSpeed release v's semantics.
func runMLPVersion(t *testing.T, v zero.Version, plan dsconfig.Plan, d ztest.MLPData, from, to int, dir string, load, save bool) result {
	t.Helper()
	r := mlpRun{v: v, from: from, to: to, dir: dir, load: load}
	if save {
		r.saveAt = []int{to}
	}
	res, err := r.run(plan, d)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// mlpRun is one run of the TinyMLP: steps [from, to), loading dir's
// latest checkpoint first when load is set, saving to dir after the steps
// in saveAt; with swap as the NVMe swap filesystem, and before(step) and
// beforeSave(step) called on rank 0 before each step and each save (while

// sameResume fails t unless first (steps 1..n, saved) followed by second
// (resumed from it) is bit for bit the uninterrupted run whole: losses,
// final weights, and every rank's engine and strategy state.
func sameResume(t *testing.T, whole, first, second result) {
	t.Helper()
	got := append(append([]float64(nil), first.losses...), second.losses...)
	for s := range got {
		if math.Float64bits(got[s]) != math.Float64bits(whole.losses[s]) {
			t.Fatalf("step %d: loss %v resumed, %v uninterrupted", s+1, got[s], whole.losses[s])
		}
	}
	if i := bitsEqual(second.final, whole.final); i >= 0 {
		t.Fatalf("final weight %d differs: %v resumed, %v uninterrupted", i, second.final[i], whole.final[i])
	}
	for r := range whole.states {
		w, s := whole.states[r], second.states[r]
		if w.GlobalSteps != s.GlobalSteps || w.SkippedSteps != s.SkippedSteps || w.Scaler != s.Scaler || fmt.Sprint(w.Scheduler) != fmt.Sprint(s.Scheduler) {
			t.Errorf("rank %d: engine state %+v resumed, %+v uninterrupted", r, s.Scaler, w.Scaler)
		}
		for g := range w.Strategy.Groups {
			wg, sg := w.Strategy.Groups[g], s.Strategy.Groups[g]
			if wg.Optim.Steps != sg.Optim.Steps {
				t.Errorf("rank %d group %d: step count %d, want %d", r, g, sg.Optim.Steps, wg.Optim.Steps)
			}
			if i := bitsEqual(sg.Master, wg.Master); i >= 0 {
				t.Errorf("rank %d group %d: master[%d] differs", r, g, i)
			}
			for k, v := range wg.Optim.State {
				if i := bitsEqual(sg.Optim.State[k], v); i >= 0 {
					t.Errorf("rank %d group %d: %s[%d] differs", r, g, k, i)
				}
			}
		}
	}
	t.Logf("%d+%d steps: final loss %.6f, bit-identical to the uninterrupted run", len(first.losses), len(second.losses), got[len(got)-1])
}

// the other ranks wait).
type mlpRun struct {
	v                  zero.Version
	from, to           int
	dir                string
	load               bool
	saveAt             []int
	swap               nvme.FS
	before, beforeSave func(step int)
	format             string // "sharded", "full": save and load Accelerate's SHARDED_ or FULL_STATE_DICT
	// async saves with SaveAsync, polled after every later step and
	// waited for after the last; afterSave(step) is called on rank 0 when
	// SaveAsync returns.
	async     bool
	afterSave func(step int)
}

func (mr mlpRun) run(plan dsconfig.Plan, d ztest.MLPData) (result, error) {
	world := plan.WorldSize
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	G := B * gas * world
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		return result{}, err
	}
	from, to := mr.from, mr.to
	micro := make([][]float64, to-from)
	for i := range micro {
		micro[i] = make([]float64, world*gas)
	}
	res := result{final: make([]float32, d.Layout.Numel), states: make([]zero.State, world)}
	err = inproc.New(world, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		r := c.Rank()
		acct := mem.NewAccountant(r)
		eng, err := zero.NewEngine(plan, zero.Options{Acct: acct, Layout: &d.Layout, Init: d.Init, Workers: 1, Comm: c, Ctx: context.Background(), Version: mr.v, SwapFS: mr.swap})
		if err != nil {
			return err
		}
		defer eng.Close()
		co := checkpoint.Options{Layout: &d.Layout, Comm: c}
		if mr.load {
			load := func() error { return checkpoint.Load(mr.dir, "", eng, co) }
			switch mr.format {
			case "sharded":
				load = func() error { return checkpoint.LoadSharded(mr.dir, eng, co) }
			case "full":
				load = func() error { return checkpoint.LoadFull(mr.dir, eng, co) }
			}
			if err := load(); err != nil {
				return err
			}
			if eng.GlobalSteps() != int64(from) {
				return fmt.Errorf("loaded global_steps %d, want %d", eng.GlobalSteps(), from)
			}
		}
		m, err := mlp.New(d.Cfg, mlp.Options{Gemm: gemm, Acct: acct, Hooks: eng.Strategy(), Round: eng.Round()})
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.Bind(eng.ModelBuffers()); err != nil {
			return err
		}
		x, y := make([]float32, B*16), make([]float32, B*8)
		var pending *checkpoint.Pending
		for s := from; s < to; s++ {
			if mr.before != nil {
				if r == 0 {
					mr.before(s + 1)
				}
				if err := c.Barrier(context.Background()).Wait(); err != nil {
					return err
				}
			}
			for mi := 0; mi < gas; mi++ {
				mb := mi*world + r
				for b := 0; b < B; b++ {
					i := (s*G + mb*B + b) % ztest.MLPSamples
					copy(x[b*16:(b+1)*16], d.X[i*16:])
					copy(y[b*8:(b+1)*8], d.Y[i*8:])
				}
				loss, err := m.Forward(model.Batch{X: x, B: B, Y: y})
				if err != nil {
					return err
				}
				micro[s-from][mb] = float64(loss)
				if err := m.Backward(eng.GradScale()); err != nil {
					return err
				}
			}
			if _, err := eng.Step(); err != nil {
				return err
			}
			if pending != nil {
				if done, err := pending.Poll(); err != nil {
					return err
				} else if done {
					pending = nil
				}
			}
			if slices.Contains(mr.saveAt, s+1) {
				if mr.beforeSave != nil {
					if r == 0 {
						mr.beforeSave(s + 1)
					}
					if err := c.Barrier(context.Background()).Wait(); err != nil {
						return err
					}
				}
				save := func() error { return checkpoint.Save(mr.dir, "", eng, co) }
				switch mr.format {
				case "sharded":
					save = func() error { return checkpoint.SaveSharded(mr.dir, eng, co) }
				case "full":
					save = func() error { return checkpoint.SaveFull(mr.dir, eng, co) }
				}
				if mr.async {
					if pending != nil {
						if err := pending.Wait(); err != nil {
							return err
						}
					}
					if pending, err = checkpoint.SaveAsync(mr.dir, "", eng, co); err != nil {
						return fmt.Errorf("saving after step %d: %w", s+1, err)
					}
				} else if err := save(); err != nil {
					return fmt.Errorf("saving after step %d: %w", s+1, err)
				}
				if mr.afterSave != nil && r == 0 {
					mr.afterSave(s + 1)
				}
			}
		}
		if pending != nil {
			if err := pending.Wait(); err != nil {
				return err
			}
		}
		if res.states[r], err = eng.ExportState(); err != nil {
			return err
		}
		full := make([]float32, d.Layout.Numel)
		if err := eng.GatherMaster(full); err != nil {
			return err
		}
		if r == 0 {
			copy(res.final, full)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, ls := range micro {
		sum := 0.0
		for _, l := range ls {
			sum += l
		}
		res.losses = append(res.losses, sum/float64(len(ls)))
	}
	return res, nil
}

func stageJSON(stage int, dtype string, subGroup int) string {
	extra := ""
	if dtype == "bf16" {
		extra = `"bf16": {"enabled": true},`
	}
	if dtype == "fp16" {
		extra = `"fp16": {"enabled": true, "initial_scale_power": 8},`
	}
	sg := ""
	if subGroup > 0 {
		sg = fmt.Sprintf(`, "sub_group_size": %d`, subGroup)
	}
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0, %s
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},
  "zero_optimization": {"stage": %d %s}
}`, extra, stage, sg)
}

func bitsEqual(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestResumeIsBitExact: N steps + save + load + N steps gives the losses,
// final weights and optimizer state of 2N uninterrupted steps, at every
// stage, on 2 ranks.
func TestResumeIsBitExact(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, tc := range []struct {
		stage    int
		dtype    string
		subGroup int
		dsAdam   bool // DeepSpeed's Adam, whose running β products are not in the state dict
	}{{0, "fp32", 0, false}, {1, "fp32", 0, false}, {2, "fp32", 0, false}, {3, "fp32", 0, false}, {3, "fp32", 3000, false},
		{0, "bf16", 0, false}, {1, "bf16", 0, false}, {2, "bf16", 0, false}, {3, "bf16", 0, false}, {2, "fp16", 0, false},
		{0, "fp32", 0, true}, {2, "fp32", 0, true}, {3, "fp32", 3000, true}, {0, "bf16", 0, true},
		{0, "fp16", 0, false}, {0, "fp16", 0, true}} { // FP16_UnfusedOptimizer's and FP16_Optimizer's state_dict
		name := fmt.Sprintf("z%d_%s_sg%d", tc.stage, tc.dtype, tc.subGroup)
		js := stageJSON(tc.stage, tc.dtype, tc.subGroup)
		if tc.dsAdam {
			name += "_dsadam"
			js = strings.Replace(js, `"torch_adam": true`, `"torch_adam": false`, 1)
		}
		n := 3
		if tc.dsAdam {
			n = 5 // β⁶ as a running product and as pow() differ in float32; β⁴ does not
		}
		t.Run(name, func(t *testing.T) {
			plan, err := ztest.Plan(js, 2)
			if err != nil {
				t.Fatal(err)
			}
			whole := runMLP(t, plan, d, 0, 2*n, "", false, false)
			dir := t.TempDir()
			first := runMLP(t, plan, d, 0, n, dir, false, true)
			second := runMLP(t, plan, d, n, 2*n, dir, true, false)
			sameResume(t, whole, first, second)
		})
	}
}

// TestCorruptionDetected: a truncated or altered file, a missing manifest
// and a latest pointing outside the directory are refused by name.
func TestCorruptionDetected(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	plan, err := ztest.Plan(stageJSON(2, "fp32", 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runMLP(t, plan, d, 0, 1, dir, false, true)
	tagDir := filepath.Join(dir, "global_step1")
	optim := filepath.Join(tagDir, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
	orig, err := os.ReadFile(optim)
	if err != nil {
		t.Fatal(err)
	}
	load := func() error {
		return inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
			eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &d.Layout, Init: d.Init, Workers: 1, Comm: c})
			if err != nil {
				return err
			}
			defer eng.Close()
			return checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &d.Layout, Comm: c})
		})
	}
	if err := load(); err != nil {
		t.Fatalf("intact checkpoint: %v", err)
	}
	flipped := append([]byte(nil), orig...)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name   string
		mutate func()
		want   string
	}{
		{"truncated", func() { os.WriteFile(optim, orig[:len(orig)-100], 0o644) }, "zero_pp_rank_1_mp_rank_00_optim_states.pt has"},
		{"bit flip", func() { os.WriteFile(optim, flipped, 0o644) }, "zero_pp_rank_1_mp_rank_00_optim_states.pt does not match its sha256"},
		{"latest escapes", func() { os.WriteFile(filepath.Join(dir, "latest"), []byte("../elsewhere"), 0o644) }, "refused"},
		{"no manifest", func() { os.Remove(filepath.Join(tagDir, "dszero_manifest_rank_1.json")) }, "manifest"},
	} {
		tc.mutate()
		err := load()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
		os.WriteFile(optim, orig, 0o644)
		os.WriteFile(filepath.Join(dir, "latest"), []byte("global_step1"), 0o644)
	}
}

// TestMismatchExplained: what cannot be resumed — another optimizer —
// is refused with what to change (another stage or world size is
// resharded: TestReshard).
func TestMismatchExplained(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	plan2, _ := ztest.Plan(stageJSON(2, "fp32", 0), 2)
	dir := t.TempDir()
	runMLP(t, plan2, d, 0, 1, dir, false, true)
	for _, tc := range []struct {
		js    string
		world int
		want  string
	}{
		{strings.Replace(stageJSON(2, "fp32", 0), `"optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999],`, `"zero_allow_untested_optimizer": true, "optimizer": {"type": "SGD", "params": {"lr": 1e-3,`, 1), 2, "use the optimizer the checkpoint was trained with"},
		{strings.Replace(stageJSON(1, "fp32", 0), `"optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999],`, `"zero_allow_untested_optimizer": true, "optimizer": {"type": "SGD", "params": {"lr": 1e-3,`, 1), 3, "use the optimizer the checkpoint was trained with"},
	} {
		plan, err := ztest.Plan(tc.js, tc.world)
		if err != nil {
			t.Fatal(err)
		}
		err = inproc.New(tc.world, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
			eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &d.Layout, Init: d.Init, Workers: 1, Comm: c})
			if err != nil {
				return err
			}
			defer eng.Close()
			return checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &d.Layout, Comm: c})
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}
