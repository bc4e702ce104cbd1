package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
)

// offloadCases are stage-3 runs whose fp32 state is offloaded: to the CPU,
// to NVMe (the optimizer state alone, or the parameters too), in one
// sub-group or several, fp32, bf16 and fp16 (its loss scaler), torch's
// AdamW and DeepSpeed's Adam.
var offloadCases = []struct {
	name     string
	dtype    string
	subGroup int
	extra    string // appended to zero_optimization
	dsAdam   bool
}{
	{"z3_bf16_cpu", "bf16", 0, `, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`, false},
	{"z3_fp32_nvme_opt", "fp32", 0, `, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}`, false},
	{"z3_fp32_nvme_sg3000", "fp32", 3000, `, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}, "offload_param": {"device": "nvme", "nvme_path": "/swap"}`, false},
	{"z3_bf16_nvme_sg1000", "bf16", 1000, `, "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}, "offload_param": {"device": "nvme", "nvme_path": "/swap"}`, false},
	{"z3_fp16_nvme_sg3000", "fp16", 3000, `, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}`, false},
	{"z3_fp32_nvme_sg3000_dsadam", "fp32", 3000, `, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}, "offload_param": {"device": "nvme", "nvme_path": "/swap"}`, true},
}

// offloadPlan is case c's plan on 2 ranks, and a fresh swap filesystem
// maker (nil without NVMe).
func offloadPlan(t *testing.T, i int) (dsconfig.Plan, func() nvme.FS) {
	t.Helper()
	c := offloadCases[i]
	js := strings.Replace(stageJSON(3, c.dtype, c.subGroup), `"stage": 3`, `"stage": 3`+c.extra, 1)
	if c.dsAdam {
		js = strings.Replace(js, `"torch_adam": true`, `"torch_adam": false`, 1)
	}
	plan, err := ztest.Plan(js, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.extra, "nvme") {
		return plan, func() nvme.FS { return nil }
	}
	return plan, func() nvme.FS {
		m := nvme.NewMemFS(0)
		if err := m.Mkdir("/swap"); err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestLoadOffloadedResaves: a stage-3 checkpoint of offloaded state,
// loaded into fresh engines (at NVMe: streamed from the files into the
// swap files) and saved again at once, is the same checkpoint byte for
// byte: every file, the manifests with their sha256s included. The load
// lost, reordered or altered nothing that a save writes.
func TestLoadOffloadedResaves(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for i, c := range offloadCases {
		t.Run(c.name, func(t *testing.T) {
			plan, swap := offloadPlan(t, i)
			first, second := t.TempDir(), t.TempDir()
			if _, err := (mlpRun{from: 0, to: 3, dir: first, saveAt: []int{3}, swap: swap()}).run(plan, d); err != nil {
				t.Fatal(err)
			}
			fs := swap()
			err := inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(cm comm.Comm) error {
				eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(cm.Rank()), Layout: &d.Layout, Init: make([]float32, d.Layout.Numel), Workers: 1, Comm: cm, Ctx: context.Background(), SwapFS: fs})
				if err != nil {
					return err
				}
				defer eng.Close()
				co := checkpoint.Options{Layout: &d.Layout, Comm: cm}
				if err := checkpoint.Load(first, "", eng, co); err != nil {
					return err
				}
				return checkpoint.Save(second, "", eng, co)
			})
			if err != nil {
				t.Fatal(err)
			}
			tag := checkpoint.Tag(3)
			names, err := os.ReadDir(filepath.Join(first, tag))
			if err != nil {
				t.Fatal(err)
			}
			if len(names) < 6 { // 2 ranks × model, optim, manifest
				t.Fatalf("%d files in the checkpoint, want 6", len(names))
			}
			for _, n := range names {
				a, err := os.ReadFile(filepath.Join(first, tag, n.Name()))
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(second, tag, n.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s: %d bytes saved after the load, %d saved by the training run, not the same bytes", n.Name(), len(b), len(a))
				}
			}
			if more, _ := os.ReadDir(filepath.Join(second, tag)); len(more) != len(names) {
				t.Errorf("%d files saved after the load, %d by the training run", len(more), len(names))
			}
		})
	}
}

// TestResumeOffloaded: n steps + save + load + n steps of a stage-3 run
// with offloaded state gives the losses, final weights and optimizer
// state of 2n uninterrupted steps, bit for bit (TestResumeIsBitExact for
// offload).
func TestResumeOffloaded(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for i, c := range offloadCases {
		t.Run(c.name, func(t *testing.T) {
			plan, swap := offloadPlan(t, i)
			n := 3
			whole, err := mlpRun{from: 0, to: 2 * n, swap: swap()}.run(plan, d)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			first, err := mlpRun{from: 0, to: n, dir: dir, saveAt: []int{n}, swap: swap()}.run(plan, d)
			if err != nil {
				t.Fatal(err)
			}
			second, err := mlpRun{from: n, to: 2 * n, dir: dir, load: true, swap: swap()}.run(plan, d)
			if err != nil {
				t.Fatal(err)
			}
			sameResume(t, whole, first, second)
		})
	}
}

// TestLoadOffloadedRefuses: loading into NVMe-offloaded engines refuses,
// by name, a checkpoint file altered on disk (the values went to the swap
// files before the sha256 was known: the load fails, and the engine
// cannot be stepped) and one of another sub_group_size.
func TestLoadOffloadedRefuses(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	const sg3000 = 2 // offloadCases' z3_fp32_nvme_sg3000
	plan, swap := offloadPlan(t, sg3000)
	dir := t.TempDir()
	if _, err := (mlpRun{from: 0, to: 3, dir: dir, saveAt: []int{3}, swap: swap()}).run(plan, d); err != nil {
		t.Fatal(err)
	}
	other, err := ztest.Plan(strings.Replace(stageJSON(3, "fp32", 1000), `"stage": 3`, `"stage": 3`+offloadCases[sg3000].extra, 1), 2)
	if err != nil {
		t.Fatal(err)
	}
	optim := filepath.Join(dir, checkpoint.Tag(3), "zero_pp_rank_1_mp_rank_00_optim_states.pt")
	for _, tc := range []struct {
		name  string
		plan  dsconfig.Plan
		alter func()
		want  []string // in rank 1's error
	}{
		{"another sub_group_size", other, func() {}, []string{"sub-group"}},
		{"a flipped byte", plan, func() {
			b, err := os.ReadFile(optim)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10 // inside a tensor's storage
			if err := os.WriteFile(optim, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{optim}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.alter()
			fs := swap()
			var rank1 error
			err := inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(cm comm.Comm) error {
				eng, err := zero.NewEngine(tc.plan, zero.Options{Acct: mem.NewAccountant(cm.Rank()), Layout: &d.Layout, Init: make([]float32, d.Layout.Numel), Workers: 1, Comm: cm, Ctx: context.Background(), SwapFS: fs})
				if err != nil {
					return err
				}
				defer eng.Close()
				fresh, err := eng.ExportState() // a state ImportState would take
				if err != nil {
					return err
				}
				err = checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &d.Layout, Comm: cm})
				if cm.Rank() == 1 {
					rank1 = err
				}
				if err == nil {
					return fmt.Errorf("rank %d: the load succeeded", cm.Rank())
				}
				// The swap files the failed load wrote are not taken as a state.
				if err := eng.ImportState(fresh); err == nil || !strings.Contains(err.Error(), "did not complete") {
					return fmt.Errorf("rank %d: ImportState after the failed load: %v, want the load refused", cm.Rank(), err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rank 1: %v", rank1)
			for _, w := range tc.want {
				if !strings.Contains(rank1.Error(), w) {
					t.Errorf("rank 1's error does not name %q: %v", w, rank1)
				}
			}
		})
	}
}
