package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainLlamaSeqParallelRecords: chat records (the loss on the
// assistant turns only, normalized over every target of the step as HF's
// Trainer does with num_items_in_batch) train a Qwen3 directory (2 heads,
// 1 kv head: replicated on both SP ranks) with sequence_parallel_size 2 —
// 2 ranks, and 2 × 2 on 4 — to the one-rank losses of the same global
// batch, unpacked and packed (a row of several samples whose positions
// restart inside a rank's slice), within 1e-5 relative.
func TestTrainLlamaSeqParallelRecords(t *testing.T) {
	mdir, dir := qwen3Dir(t), t.TempDir()
	recs := filepath.Join(dir, "chat.jsonl")
	var b strings.Builder
	for i := range 8 {
		answer := strings.Repeat(fmt.Sprintf("word%d ", i), 1+3*(i%3))
		fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "Question %d?"}, {"role": "assistant", "content": %q}]}`+"\n", i, answer)
	}
	if err := os.WriteFile(recs, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	withSP := func(path string, sp int) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out := strings.TrimSuffix(path, ".json") + fmt.Sprintf("_sp%d.json", sp)
		js := strings.Replace(string(raw), "{", fmt.Sprintf(`{"sequence_parallel_size": %d, `, sp), 1)
		if err := os.WriteFile(out, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		extra []string
		micro int
	}{{"unpacked", []string{"--seq", "64"}, 2}, {"packed", []string{"--seq", "128", "--packing"}, 1}} {
		base := append([]string{"train", "--model", mdir, "--data", recs, "--steps", "3", "--blas", "gonum"}, tc.extra...)
		ref := runLog(t, append(base, "--deepspeed", llamaConfig(t, dir, 0, tc.micro, 2))...)
		for _, run := range []struct {
			nproc, stage, gas int
		}{{2, 0, 2}, {2, 3, 2}, {4, 3, 1}} {
			got := runLog(t, append(base, "--deepspeed", withSP(llamaConfig(t, dir, run.stage, tc.micro, run.gas), 2), "--nproc", fmt.Sprint(run.nproc))...)
			for i := range ref {
				if math.Abs(got[i]-ref[i]) > 1e-5*ref[i] {
					t.Errorf("%s, sp 2 on %d ranks, stage %d: step %d loss %.9g, one rank %.9g", tc.name, run.nproc, run.stage, i+1, got[i], ref[i])
				}
			}
		}
	}
}
