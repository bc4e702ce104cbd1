package train

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero/lrsched"
)

// The reference files are the model package's copies of the harness
// output (see ../model/gpt/testdata/README.md).
const refDir = "../model/gpt/testdata/"

// refBatches serves the harness's data: step s, micro-batch mb uses
// samples [4mb, 4mb+4) of tokens[s] (33 tokens: inputs and shifted targets).
type refBatches struct {
	tokens []int64 // [10, 16, 33]
	world  int
}

func (r refBatches) Micro(step, micro, rank int, in, tg []int32) {
	mb := micro*r.world + rank
	for b := 0; b < 4; b++ {
		row := r.tokens[(step*16+mb*4+b)*33:][:33]
		for t := 0; t < 32; t++ {
			in[b*32+t] = int32(row[t])
			tg[b*32+t] = int32(row[t+1])
		}
	}
}

// referenceConfig is the harness's training setup on one rank: the global
// batch of 16 as micro-batch 4 × 4 accumulation steps.
const referenceConfig = `{
  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}}
}`

// TestPlainPyTorchParity trains the harness's TinyGPT for 10 steps and
// compares with plain PyTorch: losses within 1e-5 relative, final weights
// within 1e-5 absolute.
func TestPlainPyTorchParity(t *testing.T) {
	plan, err := dsconfig.Load(referenceConfig, dsconfig.Options{WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := gpt.Preset("tiny")
	layout := cfg.Layout()
	init := make([]float32, layout.Numel)
	if err := model.ReadLayout(refDir+"gpt_init.safetensors", &layout, init); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, layout.Numel)
	if err := model.ReadLayout(refDir+"plain_dsclip_final_fp32.safetensors", &layout, want); err != nil {
		t.Fatal(err)
	}
	f, err := model.OpenSafetensors(refDir + "gpt_data.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int64, 10*16*33)
	if err := f.ReadInt64("tokens", tokens); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var ref struct {
		Steps []struct {
			Step   int     `json:"step"`
			Loss   float64 `json:"loss"`
			LRUsed float64 `json:"lr_used"`
		} `json:"steps"`
	}
	raw, err := os.ReadFile(refDir + "plain_dsclip_result.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum}) // pure Go: the same on every machine
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	final, err := Run(Config{Plan: plan, Model: cfg, Init: init, Batches: Tokens(refBatches{tokens, 1}, 32), SeqLen: 32, Steps: 10, ReturnParams: true,
		Devices: []Device{{Acct: mem.NewAccountant(0), Gemm: gemm}}, Version: lrsched.DeepSpeed0145, Workers: 2},
		func(r Record) error { recs = append(recs, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		w := ref.Steps[i]
		if rel := math.Abs(r.Loss-w.Loss) / math.Abs(w.Loss); rel > 1e-5 {
			t.Errorf("step %d: loss %.9g, PyTorch %.9g (rel %.2g)", r.Step, r.Loss, w.Loss, rel)
		}
		if math.Abs(r.LR-w.LRUsed) > 1e-12 {
			t.Errorf("step %d: lr %g, PyTorch %g", r.Step, r.LR, w.LRUsed)
		}
	}
	maxd, worst := 0.0, 0
	for i := range final {
		if d := math.Abs(float64(final[i] - want[i])); d > maxd {
			maxd, worst = d, i
		}
	}
	t.Logf("final weights: max |Δ| = %.3g over %d parameters (element %d: %.9g vs %.9g)", maxd, len(final), worst, final[worst], want[worst])
	if maxd > 1e-5 {
		t.Errorf("final weights differ from PyTorch by %.3g", maxd)
	}
}
