package dsconfig

import (
	"fmt"
	"strings"
	"testing"
)

// TestBatchZeroAndOverflow: DeepSpeed's verdicts (Python integers, floor
// division, ZeroDivisionError for a zero divisor) for zero, negative and
// huge counts; the triplet is never negative unless written so, and counts
// beyond maxBatchCount are Unsupported with the reason.
func TestBatchZeroAndOverflow(t *testing.T) {
	cases := []struct {
		name  string
		keys  string
		world int
		want  Batch // checked when there is no error
		diags []string
	}{
		{"micro 0 with train_batch_size", `"train_batch_size": 10, "train_micro_batch_size_per_gpu": 0`, 8, Batch{},
			[]string{"error 1:60 train_micro_batch_size_per_gpu Micro batch size per gpu: 0 has to be greater than 0 (DeepSpeed divides train_batch_size by it and fails with ZeroDivisionError)"}},
		{"both 0", `"train_batch_size": 0, "train_micro_batch_size_per_gpu": 0`, 8, Batch{},
			[]string{"error 1:59 train_micro_batch_size_per_gpu Micro batch size per gpu: 0 has to be greater than 0"}},
		{"accumulation 0 with train_batch_size", `"train_batch_size": 8, "gradient_accumulation_steps": 0`, 2, Batch{},
			[]string{"error 1:56 gradient_accumulation_steps Gradient accumulation steps: 0 has to be greater than 0"}},
		{"micro 0 alone", `"train_micro_batch_size_per_gpu": 0`, 8, Batch{},
			[]string{"error 1:36 train_micro_batch_size_per_gpu Train batch size: 0 has to be greater than 0"}},
		// (7 // 1) // -2 is -4 in Python (Go's division would say -3).
		{"floor division", `"train_batch_size": 7, "gradient_accumulation_steps": -2`, 1, Batch{},
			[]string{"error 1:22 train_batch_size Micro batch size per gpu: -4 has to be greater than 0"}},
		{"micro 2**40", `"train_micro_batch_size_per_gpu": 1099511627776`, 8, Batch{8796093022208, 1099511627776, 1},
			[]string{"unsupported 1:36 train_micro_batch_size_per_gpu a micro batch of 1099511627776 samples per GPU: DeepSpeed accepts it; dszero runs at most 2147483647"}},
		{"accumulation 2**60", `"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1152921504606846976`, 8, Batch{0, 1, 1152921504606846976},
			[]string{"unsupported 1:70 gradient_accumulation_steps 1152921504606846976 gradient accumulation steps"}},
		{"product beyond int64", `"train_micro_batch_size_per_gpu": 3037000500, "gradient_accumulation_steps": 3037000500`, 1, Batch{0, 3037000500, 3037000500},
			[]string{"unsupported 1:36 train_micro_batch_size_per_gpu a micro batch of 3037000500", "unsupported 1:79 gradient_accumulation_steps 3037000500 gradient accumulation steps"}},
		{"derived train_batch_size beyond the bound", `"train_micro_batch_size_per_gpu": 65536, "gradient_accumulation_steps": 65536`, 2, Batch{8589934592, 65536, 65536},
			[]string{"unsupported 1:36 train_micro_batch_size_per_gpu a global batch of 8589934592 samples"}},
		{"at the bound", `"train_micro_batch_size_per_gpu": 2147483647`, 1, Batch{2147483647, 2147483647, 1}, nil},
		// Python compares exactly: 2**63 is not 1 * 1 * 1.
		{"train_batch_size beyond int64", `"train_batch_size": 9223372036854775808, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1`, 1, Batch{},
			[]string{"error 1:22 train_batch_size train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size: 9223372036854775808 != 1 * 1 * 1"}},
		{"a whole number beyond int64 that DeepSpeed accepts", `"train_batch_size": 1e30`, 1, Batch{0, 0, 1},
			[]string{"unsupported 1:22 train_batch_size a global batch of 1000000000000000000000000000000 samples"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := compileString(t, `{`+tc.keys+`, "optimizer": {"type": "AdamW"}}`, Options{WorldSize: tc.world})
			got := diagLines(diags)
			for _, w := range tc.diags {
				if !containsLine(got, w) {
					t.Errorf("missing %q in\n%s", w, strings.Join(got, "\n"))
				}
			}
			if !diags.HasErrors() && p.Batch != tc.want {
				t.Errorf("batch %+v, want %+v", p.Batch, tc.want)
			}
			if b := p.Batch; !strings.Contains(tc.keys, "-") && (b.TrainBatchSize < 0 || b.TrainMicroBatchSizePerGPU < 0 || b.GradientAccumulationSteps < 0) {
				t.Errorf("negative count %+v", b)
			}
		})
	}
}

// diagLines writes each Error, Warning and Unsupported as
// "severity line:col path message".
func diagLines(ds Diagnostics) []string {
	var out []string
	for _, d := range ds {
		if d.Severity != Info {
			out = append(out, fmt.Sprintf("%v %d:%d %s %s; %s", d.Severity, d.Line, d.Col, d.Path, d.Msg, d.Fix))
		}
	}
	return out
}

func containsLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TestHFBatchIsExact: the Trainer fills train_batch_size as world ×
// per_device × accumulation in Python integers; a product beyond int64
// stays exact (and Unsupported), never a negative number.
func TestHFBatchIsExact(t *testing.T) {
	hf := DefaultHFArgs()
	hf.PerDeviceTrainBatchSize, hf.GradientAccumulationSteps = 1<<40, 1<<40
	p, diags := compileString(t, `{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "optimizer": {"type": "AdamW"}}`,
		Options{WorldSize: 8, HF: &hf})
	if diags.HasErrors() {
		t.Fatal(diagText(diags))
	}
	if p.Batch != (Batch{0, 1 << 40, 1 << 40}) {
		t.Errorf("batch %+v", p.Batch)
	}
	if s, _ := settingOf(p, "train_batch_size"); s.ValueString() != "9671406556917033397649408" { // 8 × 2^80
		t.Errorf("train_batch_size recorded as %s", s.ValueString())
	}
	if diags.Count(Unsupported) == 0 {
		t.Errorf("want the counts Unsupported:\n%s", diagText(diags))
	}
	hf = DefaultHFArgs()
	hf.HiddenSize = 1 << 40
	p, diags = compileString(t, `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}`,
		Options{WorldSize: 1, HF: &hf})
	if !hasDiag(diags, wantDiag{Error, "zero_optimization.reduce_bucket_size", []string{"1208925819614629174706176 is out of the int64 range"}}) {
		t.Errorf("want h×h exact and out of range:\n%s", diagText(diags))
	}
	if p.Zero.ReduceBucketSize < 0 {
		t.Errorf("negative bucket %d", p.Zero.ReduceBucketSize)
	}
}
