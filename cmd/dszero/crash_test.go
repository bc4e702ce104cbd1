package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSaveSurvivesSIGKILL: a training run saving a checkpoint at every step
// is killed with SIGKILL at random moments — mid-step and mid-save — and
// restarted with --load each time. After every kill the latest checkpoint
// loads (the restart resumes from the step it names), so no kill ever
// leaves latest pointing at a partial checkpoint.
func TestSaveSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dszero and runs it many times")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dszero")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "z3.json")
	os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
	  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}`), 0o644)
	ck := filepath.Join(dir, "ck")
	rng := rand.New(rand.NewPCG(1, 2))
	args := func(load bool) []string {
		a := []string{"train", "--deepspeed", cfg, "--nproc", "2", "--model", "tiny", "--data", "random", "--seq", "16",
			"--steps", "100000", "--save", ck, "--save-interval", "1", "--quiet"}
		if load {
			a = append(a, "--load", ck)
		}
		return a
	}
	latest := func() int {
		b, err := os.ReadFile(filepath.Join(ck, "latest"))
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(string(b), "global_step"))
		return n
	}
	kills, midSave := 0, 0
	for i := 0; i < 12; i++ {
		before := latest()
		cmd := exec.Command(bin, args(before > 0)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("run %d ended before the kill: %v\n%s", i, err, out.String())
		}
		kills++
		if tmp, _ := filepath.Glob(filepath.Join(ck, ".*.tmp")); len(tmp) > 0 {
			midSave++ // killed while writing a checkpoint
		}
		if strings.Contains(out.String(), "dszero train:") {
			t.Fatalf("run %d failed before the kill (resuming from global_step%d):\n%s", i, before, out.String())
		}
		if l := latest(); l < before {
			t.Fatalf("run %d: latest went back from global_step%d to %d", i, before, l)
		}
	}
	// The last latest loads and trains one more step.
	n := latest()
	if n == 0 {
		t.Fatal("no checkpoint was ever completed")
	}
	a := args(true)
	a[12] = fmt.Sprint(n + 1) // --steps
	if out, err := exec.Command(bin, a...).CombinedOutput(); err != nil {
		t.Fatalf("resuming from global_step%d after %d kills: %v\n%s", n, kills, err, out)
	}
	t.Logf("%d kills, %d of them in the middle of a save; the last checkpoint, global_step%d, resumed", kills, midSave, n)
}
