package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/profiler"
	"github.com/google/go-cmp/cmp"
)

// recorder builds gpt models that record, per rank, the sequence length
// of every Forward and the layer-drop decision it ran under.
type recorder struct {
	gpt.Config
	mu    sync.Mutex
	seq   map[int][]int
	drops map[int][][]bool
	scale map[int][][]float32
	rank  int // the next Build's rank (Builds run one per rank)
}

type recModel struct {
	*gpt.Model
	r    *recorder
	rank int
	keep []bool
	sc   []float32
}

func (r *recorder) Build(o model.BuildOptions) (model.Model, error) {
	m, err := r.Config.Build(o)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rank := o.Acct.Rank()
	return &recModel{Model: m.(*gpt.Model), r: r, rank: rank}, nil
}

func (m *recModel) SetLayerDrop(keep []bool, scale []float32) error {
	m.keep, m.sc = append([]bool(nil), keep...), append([]float32(nil), scale...)
	return m.Model.SetLayerDrop(keep, scale)
}

func (m *recModel) Forward(b model.Batch) (float32, error) {
	m.r.mu.Lock()
	m.r.seq[m.rank] = append(m.r.seq[m.rank], len(b.Tokens)/b.B)
	if m.keep != nil {
		m.r.drops[m.rank] = append(m.r.drops[m.rank], m.keep)
		m.r.scale[m.rank] = append(m.r.scale[m.rank], m.sc)
	}
	m.r.mu.Unlock()
	return m.Model.Forward(b)
}

// knobRun trains the tiny GPT on world ranks with the extra ds_config
// keys, recording what every Forward saw.
func knobRun(t *testing.T, extra string, world, gas, steps int, out *bytes.Buffer) (*recorder, []Record) {
	t.Helper()
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := gpt.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": %d, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, %s}`, gas, extra)
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	if u := plan.Unsupported(); len(u) > 0 {
		t.Fatalf("unsupported: %v", u)
	}
	const T = 16
	loader, err := data.NewLoader(data.Random(mc.Vocab, 1<<16, 5), data.Layout{B: 2, T: T, GAS: gas, World: world})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, world)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: gemm}
	}
	rec := &recorder{Config: mc, seq: map[int][]int{}, drops: map[int][][]bool{}, scale: map[int][][]float32{}}
	var recs []Record
	cfg := Config{Plan: plan, Model: rec, Seed: 3, Batches: Tokens(loader, T), SeqLen: T, Steps: steps, Devices: devs, Workers: 1, Stdout: out}
	if _, err := Run(cfg, func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return rec, recs
}

// TestCurriculumTruncates: every forward of optimizer step k runs on the
// curriculum's length for update_difficulty(k) (fixed_discrete: 4 tokens
// up to step 2, 8 up to 3, then 12), on every rank; the loss stays
// finite.
func TestCurriculumTruncates(t *testing.T) {
	rec, recs := knobRun(t, `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 4, "max_difficulty": 12,
		"schedule_type": "fixed_discrete", "schedule_config": {"difficulty": [4, 8, 12], "max_step": [2, 3]}}`, 2, 2, 5, nil)
	// DeepSpeed: step s (from 1) runs at difficulty[i] for the first i
	// with s ≤ max_step[i]; each step has 2 micro-steps.
	want := []int{4, 4, 4, 4, 8, 8, 12, 12, 12, 12}
	for r := 0; r < 2; r++ {
		if d := cmp.Diff(want, rec.seq[r]); d != "" {
			t.Errorf("rank %d: sequence lengths (-want +got):\n%s", r, d)
		}
	}
	for _, r := range recs {
		if math.IsNaN(r.Loss) || r.Loss <= 0 {
			t.Errorf("step %d: loss %v", r.Step, r.Loss)
		}
	}
}

// TestCurriculumCapsAtTheSequence: a max_difficulty past --seq trains at
// the full length once the schedule gets there (Megatron's
// tokens[:, :seqlen] is then the whole row).
func TestCurriculumCapsAtTheSequence(t *testing.T) {
	rec, _ := knobRun(t, `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64,
		"schedule_type": "fixed_linear", "schedule_config": {"total_curriculum_step": 2, "difficulty_step": 8}}`, 1, 1, 3, nil)
	// s=1: floor(1/2·56+8) = 36 → 32 ≥ 16; s=2: 64.
	if d := cmp.Diff([]int{16, 16, 16}, rec.seq[0]); d != "" {
		t.Errorf("sequence lengths (-want +got):\n%s", d)
	}
}

// TestProgressiveLayerDrop: the first optimizer step runs every block
// undivided (theta starts at 1, DeepSpeed's initial current_theta); later
// steps draw with theta(t) from DeepSpeed's schedule, the same draws on
// every rank, block i kept with probability 1 − i(1−θ)/L and divided by
// the keep probability 1 − (i+1)(1−θ)/L; over many forwards at a low
// theta the deepest block is dropped most.
func TestProgressiveLayerDrop(t *testing.T) {
	const theta, gamma = 0.1, 1.0
	steps := 60
	rec, recs := knobRun(t, fmt.Sprintf(`"progressive_layer_drop": {"enabled": true, "theta": %v, "gamma": %v}`, theta, gamma), 2, 1, steps, nil)
	if len(recs) != steps {
		t.Fatalf("%d records", len(recs))
	}
	d0, d1 := rec.drops[0], rec.drops[1]
	if d := cmp.Diff(d0, d1); d != "" {
		t.Errorf("the ranks drew different layers:\n%s", d)
	}
	L := len(d0[0])
	pld := dsconfig.ProgressiveLayerDrop{Enabled: true, Theta: theta, Gamma: gamma}
	dropped := make([]int, L)
	for f, keep := range d0 {
		th := pld.ThetaFor(int64(f))
		for i := range keep {
			want := float32(1 - float64(i+1)*(1-th)/float64(L))
			if f == 0 && (!keep[i] || rec.scale[0][f][i] != 1) {
				t.Errorf("step 1: block %d kept %v keep probability %v, want every block undivided", i, keep[i], rec.scale[0][f][i])
			}
			if got := rec.scale[0][f][i]; math.Abs(float64(got-want)) > 1e-6*float64(want) {
				t.Errorf("step %d block %d: keep probability %v, want %v", f+1, i, got, want)
			}
			if !keep[i] {
				dropped[i]++
			}
		}
	}
	if dropped[0] != 0 {
		t.Errorf("block 0 (keep probability 1) was dropped %d times", dropped[0])
	}
	if L > 1 && dropped[L-1] == 0 {
		t.Errorf("the last block was never dropped in %d forwards at theta %v: %v", steps, theta, dropped)
	}
}

// TestFlopsProfilerAndCommsLogger: the profile prints once per
// micro-step of optimizer step profile_step+1 on rank 0, labelled as
// DeepSpeed labels it, and the comms summary after training lists the
// all-reduce of stage 0's gradients.
func TestFlopsProfilerAndCommsLogger(t *testing.T) {
	var out bytes.Buffer
	knobRun(t, `"flops_profiler": {"enabled": true, "profile_step": 1, "detailed": false}, "comms_logger": {"enabled": true}`, 2, 2, 3, &out)
	s := out.String()
	if n := strings.Count(s, "Profile Summary at step"); n != 2 {
		t.Errorf("%d profiles, want 2 (one per micro-step of the profiled step):\n%s", n, s)
	}
	// The tiny GPT (C 64, MLP 256, vocab 64, 2 blocks) on B=2, T=16,
	// counted by hand from DeepSpeed's rules (model/flops.go): per block
	// qkv N·C·3C, proj N·C·C, fc N·C·M, mlp proj N·M·C, q@kᵀ and att@v
	// 2·N·T·C MACs; the head N·C·V. FLOPs: 2·MACs, plus the softmax
	// B·H·T² per block, 5·N·C per LayerNorm (2 per block and the final
	// one), N·M per GELU.
	const B, T, C, M, V, H, L = 2, 16, 64, 256, 64, 4, 2
	const N = B * T
	macs := int64(L*(N*C*3*C+N*C*C+N*C*M+N*M*C+2*N*T*C) + N*C*V)
	flops := 2*macs + L*B*H*T*T + (2*L+1)*5*N*C + L*N*M
	for _, re := range []string{`Profile Summary at step 1:`, `Profile Summary at step 2:`, `(?m)^world size:\s+2\s*$`,
		`(?m)^fwd MACs per GPU:\s+` + regexp.QuoteMeta(profiler.MACsToString(macs)) + `\s*$`,
		`(?m)^fwd flops per GPU:\s+` + regexp.QuoteMeta(profiler.NumberToString(float64(flops))) + `\s*$`,
		`(?m)^Comm. Op\s+Message Size`, `(?m)^all_reduce\s*$`} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("no %s in:\n%s", re, s)
		}
	}
	if i, j := strings.Index(s, "Profile Summary at step 2"), strings.Index(s, "Comm. Op"); j < i {
		t.Errorf("the comms summary comes before the last profile")
	}
}

// TestKnobsMatchDeepSpeedsEngine trains with the ds_configs of
// dsconfig/testdata/curriculum/engine.json — what DeepSpeed v0.14.5's
// engine handed its model's forward, forward by forward — and checks
// that the loop's forwards got the same: the curriculum's sequence length,
// and PLD's theta (read back from block 0's keep probability 1 − (1−θ)/L).
func TestKnobsMatchDeepSpeedsEngine(t *testing.T) {
	raw, err := os.ReadFile("../dsconfig/testdata/curriculum/engine.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Runs map[string]struct {
			DSConfig map[string]any `json:"ds_config"`
			Steps    int            `json:"steps"`
			Forwards []struct {
				PLDTheta       *float64 `json:"pld_theta"`
				CurriculumSeqL *int     `json:"curriculum_seqlen"`
			} `json:"forwards"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pld", "curriculum_linear", "curriculum_discrete"} {
		run := tr.Runs[name]
		t.Run(name, func(t *testing.T) {
			var extra []string
			for k, v := range run.DSConfig {
				if k == "progressive_layer_drop" || k == "curriculum_learning" {
					b, _ := json.Marshal(v)
					extra = append(extra, fmt.Sprintf("%q: %s", k, b))
				}
			}
			gas := int(run.DSConfig["gradient_accumulation_steps"].(float64))
			rec, _ := knobRun(t, strings.Join(extra, ", "), 1, gas, run.Steps, nil)
			if len(run.Forwards) != len(rec.seq[0]) {
				t.Fatalf("%d forwards, DeepSpeed %d", len(rec.seq[0]), len(run.Forwards))
			}
			for i, f := range run.Forwards {
				if f.CurriculumSeqL != nil && rec.seq[0][i] != min(*f.CurriculumSeqL, 16) {
					t.Errorf("forward %d: %d tokens, DeepSpeed's curriculum_seqlen %d", i, rec.seq[0][i], *f.CurriculumSeqL)
				}
				if f.PLDTheta != nil {
					L := float64(len(rec.scale[0][i]))
					theta := 1 - L*(1-float64(rec.scale[0][i][0]))
					if math.Abs(theta-*f.PLDTheta) > 1e-6 {
						t.Errorf("forward %d: theta %v, DeepSpeed's pld_theta %v", i, theta, *f.PLDTheta)
					}
				}
			}
		})
	}
}

// TestLayerDropDrawsResume: a forward's layer draws are numpy's stream
// from the seed at that forward's place, so a run that starts at step 3 (a
// resumed one) draws what a run from step 0 draws there; and they are
// numpy's: DeepSpeedExamples' encoder loop after np.random.seed(9), L 12,
// 2 micro-steps, theta 0.1 and gamma 1 (theta 1 for the first two steps),
// run by numpy 1.24.2, keeps these blocks (1) in the first eight forwards:
//
//	for each forward: p = 1.0; step = (1 - theta) / 12
//	  for each layer: action = np.random.choice([1, 0], p=[p, 1 - p]); p = p - step
func TestLayerDropDrawsResume(t *testing.T) {
	mc, _ := gpt.Preset("tiny")
	plan, err := dsconfig.Load(`{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW"},
		"progressive_layer_drop": {"enabled": true, "theta": 0.1, "gamma": 1}}`, dsconfig.Options{WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Plan: plan, Model: mc, Seed: 9}
	draws := func(from int64) map[[2]int64][]bool {
		k, err := newKnobs(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		k.keep, k.keepProb = make([]bool, 12), make([]float32, 12)
		k.dropper = nopDropper{}
		out := map[[2]int64][]bool{}
		b := model.Batch{B: 1, Tokens: make([]int32, 4)}
		for s := from; s < 6; s++ {
			for m := int64(0); m < 2; m++ {
				if _, err := k.beforeForward(s, &b); err != nil {
					t.Fatal(err)
				}
				out[[2]int64{s, m}] = append([]bool(nil), k.keep...)
			}
		}
		return out
	}
	full, resumed := draws(0), draws(3)
	for key, keep := range resumed {
		if d := cmp.Diff(full[key], keep); d != "" {
			t.Errorf("step %d micro %d: resumed draws differ:\n%s", key[0], key[1], d)
		}
	}
	if cmp.Equal(full[[2]int64{4, 0}], full[[2]int64{4, 1}]) && cmp.Equal(full[[2]int64{4, 0}], full[[2]int64{5, 0}]) {
		t.Errorf("the micro-steps and steps draw alike: %v", full)
	}
	numpy := []string{"111111111111", "111111111111", "111111111111", "111111111111", "111111110111", "111101111111", "111111110010", "111111111001"}
	for f, want := range numpy {
		got := ""
		for _, k := range full[[2]int64{int64(f / 2), int64(f % 2)}] {
			got += map[bool]string{true: "1", false: "0"}[k]
		}
		if got != want {
			t.Errorf("forward %d: kept %s, numpy's %s", f, got, want)
		}
	}
}

type nopDropper struct{}

func (nopDropper) DropLayers() int                      { return 12 }
func (nopDropper) SetLayerDrop([]bool, []float32) error { return nil }
