package dsconfig

import (
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// FuzzCompile feeds arbitrary bytes through parsing and validation in both
// modes: nothing may panic; a rejection is always a diagnostic with a
// position or a JSON path; messages stay short whatever the input holds;
// the batch triplet is never negative unless the config writes a negative
// count, and a plan that train would run (no error, nothing unsupported)
// has a consistent triplet within maxBatchCount.
//
// Seeds: the corpus configs, and in testdata/fuzz/FuzzCompile the inputs
// that once broke it (a zero micro batch divided by, counts whose product
// overflowed int64).
func FuzzCompile(f *testing.F) {
	files, _ := filepath.Glob("testdata/ds_configs/*")
	for _, name := range files {
		if filepath.Ext(name) == ".json" || filepath.Ext(name) == ".conf" {
			data, err := os.ReadFile(name)
			if err == nil {
				f.Add(data, uint8(8))
			}
		}
	}
	f.Add([]byte(`{"train_batch_size": "auto", "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}`), uint8(3))
	f.Add([]byte(`{"zero_optimization": true, "allgather_size": 1e9, "bfloat16": {"enabled": 1}}`), uint8(1))
	hf := DefaultHFArgs()
	hf.HiddenSize, hf.MaxSteps = 64, 10
	f.Fuzz(func(t *testing.T, data []byte, world uint8) {
		w := int(world%16) + 1
		for _, opts := range []Options{{WorldSize: w}, {WorldSize: w, HF: &hf}} {
			p, diags := Compile("fuzz.json", data, opts)
			for _, d := range diags {
				if d.Severity == Error && d.Line == 0 && d.Path == "" {
					t.Fatalf("error without position or path: %s", d)
				}
				if d.Msg == "" {
					t.Fatalf("empty message: %+v", d)
				}
				if len(d.Msg)+len(d.Fix) > 8<<10 {
					t.Fatalf("a message of %d bytes: %.200s", len(d.Msg)+len(d.Fix), d)
				}
			}
			checkBatch(t, data, p, diags)
		}
	})
}

// checkBatch checks the batch triplet of a compiled plan.
func checkBatch(t *testing.T, data []byte, p Plan, diags Diagnostics) {
	t.Helper()
	b := p.Batch
	counts := []int64{b.TrainBatchSize, b.TrainMicroBatchSizePerGPU, b.GradientAccumulationSteps}
	if !writesNegativeCount(data) {
		for i, n := range counts {
			if n < 0 {
				t.Fatalf("%s is %d and the config writes no negative count: %+v", batchKeys[i], n, b)
			}
		}
	}
	if diags.HasErrors() || diags.Count(Unsupported) > 0 || p.elastic {
		return
	}
	for i, n := range counts {
		if n <= 0 || n > maxBatchCount {
			t.Fatalf("a runnable plan with %s %d", batchKeys[i], n)
		}
	}
	if want := new(big.Int).Mul(big.NewInt(b.TrainMicroBatchSizePerGPU), big.NewInt(b.GradientAccumulationSteps)); want.Mul(want, big.NewInt(p.DataParallelSize())).Cmp(big.NewInt(b.TrainBatchSize)) != 0 {
		t.Fatalf("train_batch_size %d != %d × %d × %d", b.TrainBatchSize, b.TrainMicroBatchSizePerGPU, b.GradientAccumulationSteps, p.DataParallelSize())
	}
}

// writesNegativeCount reports whether the config writes a negative number
// for one of the batch keys.
func writesNegativeCount(data []byte) bool {
	root, err := lenient.Parse("fuzz.json", data)
	if err != nil {
		return false
	}
	for _, k := range batchKeys {
		if v, ok := root.Get(k); ok && v.Kind == lenient.Number && strings.HasPrefix(v.Num, "-") {
			return true
		}
	}
	return false
}
