package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchOneBit: --onebit-adam adds a stage 0 + 1-bit Adam variant whose
// last step (after the freeze) sends ≈ 1/32 of plain stage 0's gradient
// all-reduce, as all_to_all and all_gather of packed signs, and no
// gradient all-reduce (only the clipping norm's 4 bytes).
func TestBenchOneBit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.json")
	code, stdout, errs := runCLI("bench", "--model", "small", "--nproc", "4", "--seq", "16", "--steps", "3", "--stages", "0", "--onebit-adam", "--json", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, errs)
	}
	if !strings.Contains(stdout, "stage 0 + 1-bit Adam       ok") || !strings.Contains(stdout, "sent/step") {
		t.Errorf("table:\n%s", stdout)
	}
	raw, _ := os.ReadFile(out)
	var rep benchReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Variants) != 2 {
		t.Fatalf("%d variants", len(rep.Variants))
	}
	plain, onebit := rep.Variants[0].SentBytes, rep.Variants[1].SentBytes
	if onebit["all_reduce"] != 2*3*4/4 || onebit["all_to_all"] == 0 || onebit["all_to_all"] != onebit["all_gather"] {
		t.Errorf("1-bit Adam's last step sent %v", onebit)
	}
	r := float64(sentTotal(onebit)) / float64(plain["all_reduce"])
	t.Logf("plain %v, 1-bit %v: ratio %.4f", plain, onebit, r)
	if r < 1.0/32 || r > 1.05/32 {
		t.Errorf("1-bit/plain bytes %.4f, want ≈ 1/32", r)
	}
}
