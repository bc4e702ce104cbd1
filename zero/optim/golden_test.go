package optim

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/dszero/dszero/mem"
)

// torch_golden.json.gz is written by testdata/gen_torch_golden.py with
// PyTorch 1.13.1 (Debian python3-torch 1.13.1+dfsg-4, CPU capability AVX2),
// the torch the DeepSpeed 0.14.5 reference harness ran. Regenerate with
//
//	cd zero/optim/testdata && OMP_NUM_THREADS=1 /usr/bin/python3 gen_torch_golden.py | gzip -9n > torch_golden.json.gz

type goldenRun struct {
	Sizes []int         `json:"sizes"`
	LRs   []float64     `json:"lrs"`
	Init  [][]float64   `json:"init"`
	Grads [][][]float64 `json:"grads"` // [tensor][step]
	Betas [][]float64   `json:"betas"` // per step, when the run changes them
	Steps []goldenStep  `json:"steps"` // after each step
}

type goldenStep struct {
	Params [][]float64      `json:"params"`
	State  []map[string]any `json:"state"`
}

type goldenNorms struct {
	Sizes        []int       `json:"sizes"`
	X            [][]float64 `json:"x"`
	NormF32      []float64   `json:"norm_f32"`
	NormF64      []float64   `json:"norm_f64"`
	SumF32       []float64   `json:"sum_f32"`
	SumSqF64     []float64   `json:"sumsq_f64"`
	StackedSqSum float64     `json:"stacked_sq_sum"`
	DS0Total     float64     `json:"ds0_total"`
	DS0AvgWorld2 float64     `json:"ds0_avg_world2"`
	DS0Coef      float64     `json:"ds0_coef"`
	Zero12Sq     float64     `json:"zero12_sq"`
	Zero12Total  float64     `json:"zero12_total"`
	Zero12Global float64     `json:"zero12_global"`
	Zero12Inv    float64     `json:"zero12_inv_combined"`
	TorchTotal   float64     `json:"torch_total"`
	TorchCoef1   float64     `json:"torch_coef_max1"`
	TorchCoef05  float64     `json:"torch_coef_max05"`
}

type goldenFile struct {
	TorchVersion string      `json:"torch_version"`
	AdamW        goldenRun   `json:"adamw"`
	AdamWBetas   goldenRun   `json:"adamw_betas"`
	AdamL2       goldenRun   `json:"adam_l2"`
	Adam         goldenRun   `json:"adam"`
	SGDMomentum  goldenRun   `json:"sgd_momentum"`
	SGDNesterov  goldenRun   `json:"sgd_nesterov"`
	SGDPlain     goldenRun   `json:"sgd_plain"`
	Adagrad      goldenRun   `json:"adagrad"`
	Norms        goldenNorms `json:"norms"`
}

var (
	goldenOnce sync.Once
	golden     goldenFile
	goldenErr  error
)

func loadGolden(t *testing.T) *goldenFile {
	t.Helper()
	goldenOnce.Do(func() {
		f, err := os.Open("testdata/torch_golden.json.gz")
		if err != nil {
			goldenErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			goldenErr = err
			return
		}
		goldenErr = json.NewDecoder(zr).Decode(&golden)
	})
	if goldenErr != nil {
		t.Fatalf("golden file: %v", goldenErr)
	}
	return &golden
}

func f32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func stateF32(t *testing.T, st map[string]any, key string) []float32 {
	t.Helper()
	raw, ok := st[key].([]any)
	if !ok {
		t.Fatalf("golden state has no tensor %q", key)
	}
	out := make([]float32, len(raw))
	for i, x := range raw {
		out[i] = float32(x.(float64))
	}
	return out
}

func testAlloc() Alloc { return Alloc{Acct: mem.NewAccountant(0), Tier: mem.Device} }

// replay runs one optimizer per golden tensor through every golden step and
// checks params and the named state tensors bit for bit.
func replay(t *testing.T, run *goldenRun, stateKeys []string, mk func(n int) Optimizer) {
	t.Helper()
	for ti, n := range run.Sizes {
		o := mk(n)
		p := f32s(run.Init[ti])
		for s := range run.Steps {
			o.SetLR(run.LRs[s])
			if run.Betas != nil {
				o.(BetaSetter).SetBetas([2]float64{run.Betas[s][0], run.Betas[s][1]})
			}
			o.Step(p, f32s(run.Grads[ti][s]))
			want := run.Steps[s]
			if d := firstDiff(p, f32s(want.Params[ti])); d >= 0 {
				t.Fatalf("tensor %d (n=%d) step %d: param[%d] = %v, torch %v", ti, n, s+1, d, p[d], float32(want.Params[ti][d]))
			}
			for _, key := range stateKeys {
				got, exp := o.State(key), stateF32(t, want.State[ti], key)
				if d := firstDiff(got, exp); d >= 0 {
					t.Fatalf("tensor %d step %d: %s[%d] = %v, torch %v", ti, s+1, key, d, got[d], exp[d])
				}
			}
			if st, ok := want.State[ti]["step"].(float64); ok && int64(st) != o.StepCount() {
				t.Fatalf("step count %d, torch %v", o.StepCount(), st)
			}
		}
		o.Free()
	}
}

// firstDiff returns the first index where a and b differ bitwise-as-values
// (NaN equals NaN), or -1; a length mismatch reports index min(len).
func firstDiff(a, b []float32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}
