package dsconfig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAcceptedButSuspicious: what DeepSpeed accepts without a word but
// does not do what it says, or what HF's Trainer would not read.
func TestAcceptedButSuspicious(t *testing.T) {
	sched := func(typ string, warm, total int) string {
		return fmt.Sprintf(`{%s "optimizer": {"type": "AdamW"}, "scheduler": {"type": %q, "params": {"warmup_num_steps": %d, "total_num_steps": %d}}}`, batchOK, typ, warm, total)
	}
	hf := DefaultHFArgs()
	hf.PerDeviceTrainBatchSize = 2
	cases := []struct {
		name string
		src  string
		opts Options
		want []string // "severity line:col path message" prefixes
		none string   // a message fragment that must not appear
	}{
		{"WarmupDecayLR warm-up longer than the run", sched("WarmupDecayLR", 100, 10), Options{WorldSize: 1},
			[]string{"warning 1:199 scheduler.params.total_num_steps total_num_steps 10 is less than warmup_num_steps 100: a 10-step run ends during the warm-up, so the learning rate never reaches warmup_max_lr"}, ""},
		{"WarmupCosineLR too", sched("WarmupCosineLR", 100, 10), Options{WorldSize: 1},
			[]string{"warning 1:200 scheduler.params.total_num_steps total_num_steps 10 is less than warmup_num_steps 100"}, ""},
		{"equal is fine", sched("WarmupDecayLR", 10, 10), Options{WorldSize: 1}, nil, "less than warmup_num_steps"},
		{"auto is not 0 steps", `{` + batchOK + ` "optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}}`, Options{WorldSize: 1}, nil, "less than warmup_num_steps"},
		{"the default warm-up of 1000 steps", `{` + batchOK + ` "optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 500}}}`, Options{WorldSize: 1},
			[]string{"warning 1:174 scheduler.params.total_num_steps total_num_steps 500 is less than warmup_num_steps 1000"}, ""},
		{"mics_shard_size that does not divide the world", `{` + batchOK + ` "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "mics_shard_size": 3}}`, Options{WorldSize: 2},
			[]string{"error 1:158 zero_optimization.mics_shard_size mics_shard_size 3 does not divide the world size 2"}, ""},
		{"mics_shard_size that divides it", `{` + batchOK + ` "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "mics_shard_size": 2}}`, Options{WorldSize: 4}, nil, "does not divide"},
		{"missing comma", "{" + batchOK + "\n\"optimizer\": {\"type\": \"AdamW\"}\n\"steps_per_print\": 10}", Options{WorldSize: 1},
			[]string{"warning 2:31  a missing comma between two values: DeepSpeed's Hjson reader accepts it, but it is not JSON"}, ""},
		{"comment in DeepSpeed mode is an info", "{" + batchOK + " // c\n\"optimizer\": {\"type\": \"AdamW\"}}", Options{WorldSize: 1}, nil, "not JSON"},
		{"comment for the Trainer is a warning", "{" + batchOK + " // c\n\"optimizer\": {\"type\": \"AdamW\"}}", Options{WorldSize: 1, HF: &hf},
			[]string{"warning 1:73  a comment: not JSON"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := compileString(t, tc.src, tc.opts)
			got := diagLines(diags)
			for _, w := range tc.want {
				if !containsLine(got, w) {
					t.Errorf("missing %q in\n%s", w, strings.Join(got, "\n"))
				}
			}
			if tc.none != "" && strings.Contains(strings.Join(got, "\n"), tc.none) {
				t.Errorf("unexpected %q in\n%s", tc.none, strings.Join(got, "\n"))
			}
		})
	}
	_, diags := compileString(t, "{"+batchOK+" // c\n\"optimizer\": {\"type\": \"AdamW\"}}", Options{WorldSize: 1})
	var infos []string
	for _, d := range diags.Filter(Info) {
		infos = append(infos, fmt.Sprintf("%d:%d %s", d.Line, d.Col, d.Msg))
	}
	want := []string{"1:73 a comment: not JSON. DeepSpeed's Hjson reader accepts it, but HF's Trainer and Accelerate read a ds_config with json.load, which rejects the file"}
	if diff := cmp.Diff(want, infos); diff != "" {
		t.Errorf("infos (-want +got):\n%s", diff)
	}
}
