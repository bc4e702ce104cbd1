//go:build mpi

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrainMPI builds dszero with the mpi tag and trains the tiny GPT under
// mpirun, one rank per process, at stage 1 on 2 ranks, stage 2 on 3 and
// stage 3 (units gathered, prefetched, reduce-scattered) on 2 and 3, and
// stage 3 with MiCS shard groups of 2 on 4 (communicators split in MPI):
// the logged losses and gradient norms equal, bit for bit, those of
// --nproc in one process (the MPI backend reduces in inproc's rank order).
// Only rank 0 prints and logs. An --nproc that disagrees with mpirun's
// -np is refused.
func TestTrainMPI(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dszero")
	if out, err := exec.Command("go", "build", "-tags", "mpi", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags mpi: %v\n%s", err, out)
	}
	type rec struct {
		Step     int64   `json:"step"`
		Loss     float64 `json:"loss"`
		GradNorm float64 `json:"grad_norm"`
	}
	readLog := func(path string) []rec {
		t.Helper()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var recs []rec
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r rec
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			recs = append(recs, r)
		}
		return recs
	}
	job := func(np int, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(np), bin, "train"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct{ stage, np, mics int }{{1, 2, 0}, {2, 3, 0}, {3, 2, 0}, {3, 3, 0}, {3, 4, 2}} {
		t.Run(fmt.Sprintf("stage%d/np=%d/mics=%d", tc.stage, tc.np, tc.mics), func(t *testing.T) {
			cfg := filepath.Join(dir, fmt.Sprintf("z%d_%d_%d.json", tc.stage, tc.np, tc.mics))
			os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
			  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": %d, "reduce_bucket_size": 20000,
			  "stage3_param_persistence_threshold": 1000, "stage3_prefetch_bucket_size": 30000, "overlap_comm": true,
			  "mics_shard_size": %d}}`, tc.stage, tc.mics)), 0o644)
			args := []string{"--model", "tiny", "--data", "random", "--seq", "16", "--steps", "3", "--quiet", "--blas", "gonum", "--deepspeed", cfg}
			mpiLog, inLog := filepath.Join(dir, fmt.Sprintf("mpi%d_%d_%d.jsonl", tc.stage, tc.np, tc.mics)), filepath.Join(dir, fmt.Sprintf("inproc%d_%d_%d.jsonl", tc.stage, tc.np, tc.mics))
			start := time.Now()
			out, err := job(tc.np, append(args, "--json-log", mpiLog)...)
			if err != nil {
				t.Fatalf("mpirun -np %d: %v\n%s", tc.np, err, out)
			}
			t.Logf("mpirun -np %d: %v", tc.np, time.Since(start).Round(time.Millisecond))
			if n := strings.Count(out, "dszero: "); n != 1 {
				t.Errorf("%d ranks printed the header, want rank 0 alone:\n%s", n, out)
			}
			if code, o, e := runCLI(append([]string{"train", "--nproc", fmt.Sprint(tc.np), "--json-log", inLog}, args...)...); code != 0 {
				t.Fatalf("--nproc %d: exit %d\n%s%s", tc.np, code, o, e)
			}
			got, want := readLog(mpiLog), readLog(inLog)
			if len(got) != 3 || len(want) != 3 {
				t.Fatalf("%d records under mpirun, %d in-process; want 3", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("step %d: mpirun %+v, in-process %+v", i+1, got[i], want[i])
				}
			}
		})
	}
	out, err := job(2, "--model", "tiny", "--steps", "1", "--quiet", "--nproc", "3")
	if err == nil || !strings.Contains(out, "--nproc 3 conflicts with the world size 2") {
		t.Errorf("mpirun -np 2 … --nproc 3: %v\n%s", err, out)
	}
}
