package profiler_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/llama"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/profiler"
)

// goldenCase is one testdata/<case>.json written by gen_golden.py: a
// model shape, the micro-batch, the flops_profiler options, the engine's
// header and timers, and what DeepSpeed's profiler measured and counted
// for every module of the PyTorch twin (by its named_modules() name).
type goldenCase struct {
	Case         string          `json:"case"`
	Kind         string          `json:"kind"`
	Family       string          `json:"family"`
	Model        json.RawMessage `json:"model"`
	B            int             `json:"B"`
	T            int             `json:"T"`
	RowPositions bool            `json:"row_positions"`
	Step         int             `json:"step"`
	Options      struct {
		ModuleDepth        int     `json:"module_depth"`
		TopModules         int     `json:"top_modules"`
		Detailed           bool    `json:"detailed"`
		RecomputeFwdFactor float64 `json:"recompute_fwd_factor"`
	} `json:"options"`
	Engine *struct {
		WorldSize  int     `json:"world_size"`
		DP         int     `json:"dp"`
		MP         int     `json:"mp"`
		MicroBatch int     `json:"micro_batch"`
		FwdMS      float64 `json:"fwd_ms"`
		BwdMS      float64 `json:"bwd_ms"`
		StepMS     float64 `json:"step_ms"`
	} `json:"engine"`
	Durations map[string]float64 `json:"durations"`
	FLOPs     map[string]int64   `json:"flops"`
	MACs      map[string]int64   `json:"macs"`
	Params    map[string]int64   `json:"params"`
}

// counter builds the dszero configuration the case's twin mirrors.
func (g *goldenCase) counter(t *testing.T) model.FlopCounter {
	t.Helper()
	switch g.Kind {
	case "gpt":
		var m struct {
			V, Ctx, C, NH, L, M int
			Tied                bool
		}
		mustUnmarshal(t, g.Model, &m)
		return gpt.Config{Vocab: m.V, Context: m.Ctx, Dim: m.C, Heads: m.NH, Layers: m.L, MLP: m.M, Tied: m.Tied}.WithDefaults()
	case "mlp":
		var m struct{ Sizes []int }
		mustUnmarshal(t, g.Model, &m)
		return mlp.Config{Sizes: m.Sizes}
	case "llama":
		var m struct {
			V, H, I, L, NH, NKV, D int
			Eps, Theta             float64
			Tied                   bool
			Pad                    *int
			QKVBias                bool `json:"qkv_bias"`
		}
		mustUnmarshal(t, g.Model, &m)
		fam := map[string]llama.Family{"Llama": llama.Llama, "Qwen2": llama.Qwen2, "Qwen3": llama.Qwen3}[g.Family]
		c := llama.Config{Family: fam, Vocab: m.V, Hidden: m.H, Intermediate: m.I, Layers: m.L, Heads: m.NH,
			KVHeads: m.NKV, HeadDim: m.D, Eps: m.Eps, Rope: llama.Rope{Theta: m.Theta}, Tied: m.Tied, PadTokenID: m.Pad}
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if m.QKVBias && fam != llama.Qwen2 {
			t.Fatalf("case %s: qkv_bias only for qwen2 here", g.Case)
		}
		return c
	}
	t.Fatalf("case %s: unknown kind %q", g.Case, g.Kind)
	return nil
}

func mustUnmarshal(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// paths gives each module its named_modules() name: the Names from the
// root joined with dots.
func paths(mods []model.FlopModule) []string {
	out := make([]string, len(mods))
	var stack []string
	for i, m := range mods {
		stack = append(stack[:m.Depth], m.Name)
		out[i] = strings.Join(stack[1:], ".")
	}
	return out
}

// subtree sums a module's own counts over its subtree, as DeepSpeed's
// get_module_flops does, and counts its distinct parameter elements.
func subtree(mods []model.FlopModule, l model.Layout, i int) (flops, macs, params int64) {
	seen := map[string]bool{}
	for j := i; j < len(mods) && (j == i || mods[j].Depth > mods[i].Depth); j++ {
		flops += mods[j].FLOPs
		macs += mods[j].MACs
		for _, p := range mods[j].Params {
			if !seen[p] {
				seen[p] = true
				k, ok := l.Index(p)
				if !ok {
					panic("unknown parameter " + p)
				}
				params += int64(l.Specs[k].Numel)
			}
		}
	}
	return
}

// TestReportsMatchDeepSpeed rebuilds each report DeepSpeed's profiler
// printed for a PyTorch twin of a dszero model, from dszero's own module
// counts (FlopCounter.FlopModules) and the latencies DeepSpeed measured,
// and compares: every module's params, MACs and FLOPs with what
// DeepSpeed counted, then the printed text byte for byte.
func TestReportsMatchDeepSpeed(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "formats.json" {
			continue
		}
		n++
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var g goldenCase
			mustUnmarshal(t, raw, &g)
			want, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			fc := g.counter(t)
			layout := fc.Layout()
			mods := fc.FlopModules(model.FlopShape{Batch: g.B, Seq: g.T, RowPositions: g.RowPositions})
			names := paths(mods)

			type counts struct{ FLOPs, MACs, Params int64 }
			gotCounts, wantCounts := map[string]counts{}, map[string]counts{}
			for name := range g.Durations {
				wantCounts[name] = counts{g.FLOPs[name], g.MACs[name], g.Params[name]}
			}
			latency := make([]float64, len(mods))
			for i, name := range names {
				fl, mc, pa := subtree(mods, layout, i)
				gotCounts[name] = counts{fl, mc, pa}
				latency[i] = g.Durations[name]
			}
			if d := cmp.Diff(wantCounts, gotCounts); d != "" {
				t.Fatalf("per-module subtree counts (-DeepSpeed +dszero):\n%s", d)
			}

			r := profiler.Report{Step: g.Step, Modules: mods, Layout: &layout, Latency: latency,
				ModuleDepth: g.Options.ModuleDepth, TopModules: g.Options.TopModules, Detailed: g.Options.Detailed}
			if e := g.Engine; e != nil {
				r.Engine = &profiler.Engine{WorldSize: e.WorldSize, DataParallel: e.DP, ModelParallel: e.MP,
					MicroBatch: e.MicroBatch, Fwd: e.FwdMS / 1000.0, Bwd: e.BwdMS / 1000.0, Step: e.StepMS / 1000.0,
					RecomputeFwdFactor: g.Options.RecomputeFwdFactor}
			}
			var buf bytes.Buffer
			if err := profiler.Write(&buf, r); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(buf.String(), "\n")); d != "" {
				t.Errorf("report (-DeepSpeed +dszero):\n%s", d)
			}
		})
	}
	if n < 6 {
		t.Fatalf("found %d golden cases in testdata, want 6", n)
	}
}
