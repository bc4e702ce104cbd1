package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
)

// saveJSON is a setup without a scheduler, so that a resumed run takes
// its lr from the config, at a stage with the given extra
// zero_optimization keys.
func saveJSON(stage int, lr float64, zero string) string {
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": %g, "weight_decay": 0.01}},
  "zero_optimization": {"stage": %d %s}
}`, lr, stage, zero)
}

// saveRun trains the tiny GPT on world ranks under js up to steps,
// saving in dir every interval steps (resuming from dir when resume is
// set), and calls onStep after each step.
func saveRun(t *testing.T, g gptRef, js string, world, steps, interval int, dir string, resume bool, onStep func(Record) error) error {
	t.Helper()
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, world)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
	}
	cfg := Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: steps, Devices: devs, Workers: 1,
		Batches: Tokens(gptSamples{tokens: g.tokens, B: 1, gas: 1, world: world}, 32), SaveDir: dir, SaveInterval: interval}
	if resume {
		cfg.LoadDir = dir
	}
	_, err = Run(cfg, onStep)
	return err
}

// checkKept: dir/latest names want and no checkpoint of a later step
// was published, nor left half-written.
func checkKept(t *testing.T, dir, want, refused string) {
	t.Helper()
	if got, err := checkpoint.LatestTag(dir); err != nil || got != want {
		t.Errorf("latest = %q, %v; want %q", got, err, want)
	}
	for _, p := range []string{refused, "." + refused + ".tmp"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after its save was refused (%v)", p, err)
		}
	}
}

// TestSaveRefusesNonFinite: a step that leaves NaN and Inf in the fp32
// master weights (a resumed run whose lr overflows float32) does not
// become a checkpoint, at every stage and offload tier: the run fails
// with an error naming the step, the tensor, the count and (on NVMe) the
// swap file, and latest still names the checkpoint before it.
func TestSaveRefusesNonFinite(t *testing.T) {
	g := loadGPT(t)
	for _, tc := range []struct {
		name  string
		stage int
		zero  string
		want  string // in the message: the tensor
	}{
		{"stage0", 0, "", "the fp32 master weights: "},
		{"stage1", 1, "", "the fp32 master weights: "},
		{"stage2", 2, `, "offload_optimizer": {"device": "cpu"}`, "the fp32 master weights: "},
		{"stage3", 3, "", "sub-group 0's fp32 master weights: "},
		{"stage3-cpu", 3, `, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`, "sub-group 0's fp32 master weights: "},
		{"stage3-nvme", 3, `, "offload_optimizer": {"device": "nvme", "nvme_path": %q}, "offload_param": {"device": "nvme", "nvme_path": %q}`,
			"sub-group 0's fp32 master weights: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, swap := t.TempDir(), t.TempDir()
			zero := tc.zero
			if strings.Contains(zero, "%q") {
				zero = fmt.Sprintf(zero, swap, swap)
			}
			if err := saveRun(t, g, saveJSON(tc.stage, 1e-3, zero), 2, 1, 0, dir, false, nil); err != nil {
				t.Fatal(err)
			}
			// lr 1e39 is +Inf in float32: the step sends every master
			// weight to ±Inf or NaN.
			err := saveRun(t, g, saveJSON(tc.stage, 1e39, zero), 2, 2, 0, dir, true, nil)
			if err == nil {
				t.Fatal("a run whose state went non-finite saved its checkpoint")
			}
			t.Log(err)
			msg := err.Error()
			wants := []string{"step 2: refusing to save checkpoint global_step2", "rank 0's fp32 master weights or optimizer state hold NaN or Inf", tc.want, "values are NaN or ±Inf (the first at element", "latest still names global_step1"}
			if tc.name == "stage3-nvme" {
				wants = append(wants, "read from swap file "+filepath.Join(swap, "dszero_rank0", "optimizer", "subgroup0.master.swp"))
			}
			for _, w := range wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			checkKept(t, dir, "global_step1", "global_step2")
		})
	}
}

// TestGarbledSwapFile: a master swap file overwritten between steps of a
// stage-3 NVMe-offload run fails the run — at the save that would have
// read it, or at the next step's read — with the error naming the swap
// file and the byte range; no checkpoint is made from it, and latest
// still names the one before. The garbage is NaN bytes (what the issue
// saw) or finite floats, which only the checksum can tell from weights.
func TestGarbledSwapFile(t *testing.T) {
	g := loadGPT(t)
	nan := make([]byte, 512)
	for i := range nan {
		nan[i] = 0xff
	}
	ones := make([]byte, 512)
	for i := 0; i < len(ones); i += 4 {
		binary.LittleEndian.PutUint32(ones[i:], math.Float32bits(1))
	}
	for _, tc := range []struct {
		name            string
		world           int // the last rank's file is garbled
		interval, after int // save every interval steps; garble after step after
		garbage         []byte
		kept, refused   string
		when            string
	}{
		{"at the save/NaN", 1, 1, 2, nan, "global_step1", "global_step2", "step 2: refusing to save checkpoint global_step2"},
		{"at the save/finite", 1, 1, 2, ones, "global_step1", "global_step2", "step 2: refusing to save checkpoint global_step2"},
		// Rank 0 is fine, and saves nothing either.
		{"at the save/rank 1 of 2", 2, 1, 2, ones, "global_step1", "global_step2", "rank 1: step 2: refusing to save checkpoint global_step2"},
		{"at the next step/finite", 1, 2, 3, ones, "global_step2", "global_step4", "step 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, swap := t.TempDir(), t.TempDir()
			js := saveJSON(3, 1e-3, fmt.Sprintf(`, "offload_optimizer": {"device": "nvme", "nvme_path": %q}, "offload_param": {"device": "nvme", "nvme_path": %q}`, swap, swap))
			master := filepath.Join(swap, fmt.Sprintf("dszero_rank%d", tc.world-1), "optimizer", "subgroup0.master.swp")
			err := saveRun(t, g, js, tc.world, 4, tc.interval, dir, false, func(r Record) error {
				if r.Step != int64(tc.after) {
					return nil
				}
				f, err := os.OpenFile(master, os.O_RDWR, 0)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = f.WriteAt(tc.garbage, 4096)
				return err
			})
			if err == nil {
				t.Fatal("the run trained on a garbled swap file")
			}
			t.Log(err)
			if !errors.Is(err, nvme.ErrChecksum) {
				t.Errorf("error %v is not a checksum mismatch", err)
			}
			msg := err.Error()
			for _, w := range []string{tc.when, master, "offset 0 (", "checksum mismatch", "corruption", "checkpoints saved before this error are intact"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if strings.Contains(msg, "cannot be saved (see their errors)") {
				t.Errorf("error %q reports the ranks that only agreed not to save", msg)
			}
			checkKept(t, dir, tc.kept, tc.refused)
		})
	}
}
