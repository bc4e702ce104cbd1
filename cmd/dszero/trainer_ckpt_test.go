package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/checkpoint/hfstate"
	"github.com/dszero/dszero/dsconfig"
	"github.com/google/go-cmp/cmp"
)

// TestTrainerCheckpoints: --output_dir saves as the Trainer does —
// checkpoint-N folders every --save_steps and after the last step, each
// with DeepSpeed's global_stepN and latest, trainer_state.json (the step,
// the epoch, the log history every --logging_steps) and each rank's
// random state; --save_total_limit 2 leaves exactly the newest two; and
// --resume_from_checkpoint true continues from the newest bit for bit:
// the same losses and the same checkpoint files as a run that never
// stopped.
func TestTrainerCheckpoints(t *testing.T) {
	dir := t.TempDir()
	whole, split := filepath.Join(dir, "whole"), filepath.Join(dir, "split")
	args := func(out string, steps string, extra ...string) []string {
		return tinyTrain(append([]string{"--quiet", "--nproc", "2", "--steps", steps, "--output_dir", out, "--save_steps", "2",
			"--save_total_limit", "2", "--logging_steps", "2", "--json-log", out + ".log"}, extra...)...)
	}
	if code, out, errs := runCLI(args(whole, "8")...); code != 0 {
		t.Fatalf("8 steps: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCLI(args(split, "6")...)
	if code != 0 {
		t.Fatalf("6 steps: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "saved "+filepath.Join(split, "checkpoint-6")+" (") || !strings.Contains(out, "deleted older checkpoint "+filepath.Join(split, "checkpoint-2")) {
		t.Errorf("6 steps: the output names neither the save nor the rotation:\n%s", out)
	}
	first := logLosses(t, split+".log")
	code, out, errs = runCLI(args(split, "8", "--resume_from_checkpoint", "true")...)
	if code != 0 || !strings.Contains(out, "resumed from "+filepath.Join(split, "checkpoint-6", "global_step6")) {
		t.Fatalf("resume: exit %d\n%s%s", code, out, errs)
	}
	for _, out := range []string{whole, split} {
		var got []string
		cs, err := hfstate.ListCheckpoints(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			got = append(got, filepath.Base(c.Path))
		}
		if diff := cmp.Diff([]string{"checkpoint-6", "checkpoint-8"}, got); diff != "" {
			t.Errorf("%s after --save_total_limit 2 (-want +got):\n%s", out, diff)
		}
		ents, _ := os.ReadDir(out)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("%s: %s left behind", out, e.Name())
			}
		}
	}
	st, err := hfstate.ReadTrainerState(filepath.Join(split, "checkpoint-8"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, h := range st.LogHistory {
		s, _ := logStep(h)
		steps = append(steps, s)
		for _, k := range []string{"loss", "grad_norm", "learning_rate", "epoch"} {
			if _, ok := h[k]; !ok {
				t.Errorf("log_history entry %v has no %s", h, k)
			}
		}
	}
	if diff := cmp.Diff([]int64{2, 4, 6, 8}, steps); diff != "" {
		t.Errorf("log_history steps across the resume (-want +got):\n%s", diff)
	}
	if st.GlobalStep != 8 || st.MaxSteps != 8 || st.Epoch == nil || *st.Epoch <= 0 || st.LoggingSteps != 2 || st.SaveSteps != 2 {
		t.Errorf("trainer_state.json: global_step %d, max_steps %d, epoch %v, logging_steps %d, save_steps %d", st.GlobalStep, st.MaxSteps, st.Epoch, st.LoggingSteps, st.SaveSteps)
	}
	for r := range 2 {
		if rs, err := hfstate.ReadRNG(filepath.Join(split, "checkpoint-8"), r); err != nil || rs.Step != 8 {
			t.Errorf("rank %d's random state: %+v, %v", r, rs, err)
		}
	}
	resumed := logLosses(t, split+".log")
	want := logLosses(t, whole+".log")
	for s := int64(1); s <= 8; s++ {
		got, ok := first[s]
		if s > 6 {
			got, ok = resumed[s]
		}
		if !ok || got != want[s] {
			t.Errorf("step %d: loss %v (logged %v), the uninterrupted run's %v", s, got, ok, want[s])
		}
	}
	a, b := filepath.Join(whole, "checkpoint-8", "global_step8"), filepath.Join(split, "checkpoint-8", "global_step8")
	files, _ := os.ReadDir(a)
	if len(files) == 0 {
		t.Fatalf("%s is empty", a)
	}
	for _, e := range files {
		x, err1 := os.ReadFile(filepath.Join(a, e.Name()))
		y, err2 := os.ReadFile(filepath.Join(b, e.Name()))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between the resumed run and the uninterrupted one (%v, %v)", e.Name(), err1, err2)
		}
	}
}

// TestTrainerCheckpointFlags: the Trainer's flags refuse what cannot run,
// with exit code 2 and the fix.
func TestTrainerCheckpointFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--save", dir, "--output_dir", dir}, "are two ways to save; give one"},
		{[]string{"--save", dir, "--save_total_limit", "2"}, "give --output_dir"},
		{[]string{"--output_dir", filepath.Join(dir, "none"), "--resume_from_checkpoint", "true"}, "no valid checkpoint found in output directory"},
		{[]string{"--save_total_limit", "-1"}, "save_total_limit"},
	} {
		code, _, errs := runCLI(tinyTrain(append([]string{"--quiet", "--steps", "1"}, tc.args...)...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q: %s", tc.args, code, tc.want, errs)
		}
	}
}

// TestTrainerFSDP: with an FSDP setup, --output_dir writes each
// checkpoint-N as the Trainer does under FSDP, in the setup's
// state_dict_type — SHARDED_STATE_DICT: pytorch_model_fsdp_0/ and
// optimizer_0/ in torch.distributed.checkpoint's format; FULL_STATE_DICT:
// pytorch_model_fsdp.bin and optimizer.bin — with no DeepSpeed files, and
// --resume_from_checkpoint true continues from it bit for bit (under
// HYBRID_SHARD too), and at another world size and strategy.
func TestTrainerFSDP(t *testing.T) {
	sharded := []string{"pytorch_model_fsdp_0/.metadata", "optimizer_0/.metadata", "pytorch_model_fsdp_0/__1_0.distcp"}
	for _, tc := range []struct {
		name, config string
		hybrid       bool // HYBRID_SHARD over 4 ranks in groups of 2, from config
		files        []string
	}{
		{"sharded", "BenasdTW__LLMTrain__fsdp_grad_op.yaml", false, sharded},
		{"full", "BenasdTW__LLMTrain__fsdp.yaml", false, []string{"pytorch_model_fsdp.bin", "optimizer.bin"}},
		{"hybrid_sharded", "BenasdTW__LLMTrain__fsdp_grad_op.yaml", true, sharded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			whole, split := filepath.Join(dir, "whole"), filepath.Join(dir, "split")
			config, ranks := fsdpCorpus+tc.config, []string{"--nproc", "2"}
			if tc.hybrid {
				b, err := os.ReadFile(config)
				if err != nil {
					t.Fatal(err)
				}
				config = filepath.Join(dir, "hybrid.yaml")
				if err := os.WriteFile(config, []byte(strings.Replace(string(b), "SHARD_GRAD_OP", "HYBRID_SHARD", 1)), 0o644); err != nil {
					t.Fatal(err)
				}
				ranks = []string{"--nproc", "4", "--shard-group-size", "2"}
			}
			args := func(out, steps string, extra ...string) []string {
				return append(append([]string{"train", "--fsdp-config", config, "--model", "tiny", "--data", "random",
					"--seq", "16", "--blas", "gonum", "--quiet", "--steps", steps, "--output_dir", out, "--save_steps", "2", "--json-log", out + ".log"}, ranks...), extra...)
			}
			if code, out, errs := runCLI(args(whole, "6")...); code != 0 {
				t.Fatalf("6 steps: exit %d\n%s%s", code, out, errs)
			}
			if code, out, errs := runCLI(args(split, "4")...); code != 0 {
				t.Fatalf("4 steps: exit %d\n%s%s", code, out, errs)
			}
			ck := filepath.Join(split, "checkpoint-4")
			for _, p := range append(tc.files, "dszero_state.pt", "trainer_state.json") {
				if _, err := os.Stat(filepath.Join(ck, p)); err != nil {
					t.Errorf("checkpoint-4: %v", err)
				}
			}
			for _, p := range []string{"latest", "global_step4", ".full.tmp"} {
				if _, err := os.Stat(filepath.Join(ck, p)); err == nil {
					t.Errorf("checkpoint-4 holds %s: Accelerate's state dicts replace DeepSpeed's files", p)
				}
			}
			first := logLosses(t, split+".log")
			code, out, errs := runCLI(args(split, "6", "--resume_from_checkpoint", "true")...)
			if code != 0 || !strings.Contains(out, "resumed from "+ck+" (step 4)") {
				t.Fatalf("resume: exit %d\n%s%s", code, out, errs)
			}
			want, resumed := logLosses(t, whole+".log"), logLosses(t, split+".log")
			for s := int64(1); s <= 6; s++ {
				got := first[s]
				if s > 4 {
					got = resumed[s]
				}
				if got != want[s] {
					t.Errorf("step %d: loss %v, the uninterrupted run's %v", s, got, want[s])
				}
			}
			other := []string{"train", "--fsdp-config", fsdpCorpus + tc.config, "--model", "tiny", "--data", "random", "--seq", "16", "--blas", "gonum", "--quiet",
				"--steps", "5", "--output_dir", filepath.Join(dir, "three"), "--nproc", "3", "--resume_from_checkpoint", ck}
			if code, out, errs := runCLI(other...); code != 0 || !strings.Contains(out, "resumed from "+ck) {
				t.Errorf("resuming at 3 ranks: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

// TestExplainCheckpoints: config explain names the files each save
// writes, by stage and precision, under both layouts.
func TestExplainCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		js    string
		world int
		want  []string
	}{
		{`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}}`, 3,
			[]string{"zero_pp_rank_1_mp_rank_00_model_states.pt", "… for each rank", "DIR/consolidated"}},
		{`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}`, 2,
			[]string{"mp_rank_00_model_states.pt, bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt, bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt)", "DIR/checkpoint-N/"}},
	} {
		p, err := dsconfig.Load(tc.js, dsconfig.Options{WorldSize: tc.world})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		explainCheckpoints(&b, p)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: no %q in\n%s", tc.js, w, b.String())
			}
		}
	}
}
