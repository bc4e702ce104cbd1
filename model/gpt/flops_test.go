package gpt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

// own is a module's own count, by its named_modules() path.
type own struct {
	Class       string
	MACs, FLOPs int64
	Unit        int
}

func ownCounts(mods []model.FlopModule) map[string]own {
	out := map[string]own{}
	var stack []string
	for _, m := range mods {
		stack = append(stack[:m.Depth], m.Name)
		out[strings.Join(stack[1:], ".")] = own{m.Class, m.MACs, m.FLOPs, m.Unit}
	}
	return out
}

// totals sums the modules' counts and their distinct parameter elements.
func totals(mods []model.FlopModule, l model.Layout) (macs, flops, params int64) {
	seen := map[string]bool{}
	for _, m := range mods {
		macs += m.MACs
		flops += m.FLOPs
		for _, p := range m.Params {
			if !seen[p] {
				seen[p] = true
				i, ok := l.Index(p)
				if !ok {
					panic("unknown parameter " + p)
				}
				params += int64(l.Specs[i].Numel)
			}
		}
	}
	return
}

// TestFlopModulesTinyByHand checks every module of the harness's TinyGPT
// (V 64, C 64, 4 heads of 16, 2 blocks, MLP 256) on its training
// micro-batch B 4, T 32 (N = 128 rows) against a count from the shapes:
//
//	ln1, ln2, ln_f   F.layer_norm, 5·N·C            = 5·128·64          = 40,960 FLOPs
//	attn.qkv         N·C·3C                         = 128·64·192        = 1,572,864 MACs
//	attn (itself)    q @ kᵀ per (b, h): T·HS·T = 16,384, and att @ v the same,
//	                 over B·NH = 16 pairs           = 2·16·16,384       = 524,288 MACs,
//	                 plus softmax over (B, NH, T, T) = 16·32·32         = 16,384 FLOPs
//	attn.proj        N·C·C                          = 128·64·64         = 524,288 MACs
//	mlp (itself)     gelu over (N, M)               = 128·256           = 32,768 FLOPs
//	mlp.fc, .proj    N·C·M                          = 128·64·256        = 2,097,152 MACs each
//	lm_head          N·C·V                          = 128·64·64         = 524,288 MACs
//
// Totals: MACs 2·(1,572,864 + 524,288 + 524,288 + 2·2,097,152) + 524,288
// = 14,155,776; FLOPs twice that plus 5 LayerNorms, 2 softmaxes and 2
// gelus: 28,311,552 + 204,800 + 32,768 + 65,536 = 28,614,656; params
// 110,336 (the harness README's count). DeepSpeed printed "14.16 MMACs"
// and "28.61 M" for this model (profiler/testdata/gpt_tiny.txt).
func TestFlopModulesTinyByHand(t *testing.T) {
	cfg, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	mods := cfg.FlopModules(model.FlopShape{Batch: 4, Seq: 32})
	const ln = 40_960
	want := map[string]own{
		"":        {"TinyGPT", 0, 0, model.NoUnit},
		"wte":     {"Embedding", 0, 0, model.NoUnit},
		"wpe":     {"Embedding", 0, 0, model.NoUnit},
		"blocks":  {"ModuleList", 0, 0, model.NoUnit},
		"ln_f":    {"LayerNorm", 0, ln, model.NoUnit},
		"lm_head": {"Linear", 524_288, 1_048_576, model.NoUnit},
	}
	for _, l := range []string{"0", "1"} {
		unit := 1
		if l == "1" {
			unit = 2
		}
		b := "blocks." + l
		want[b] = own{"Block", 0, 0, unit}
		want[b+".ln1"] = own{"LayerNorm", 0, ln, model.NoUnit}
		want[b+".ln2"] = own{"LayerNorm", 0, ln, model.NoUnit}
		want[b+".attn"] = own{"CausalSelfAttention", 524_288, 2*524_288 + 16_384, model.NoUnit}
		want[b+".attn.qkv"] = own{"Linear", 1_572_864, 2 * 1_572_864, model.NoUnit}
		want[b+".attn.proj"] = own{"Linear", 524_288, 2 * 524_288, model.NoUnit}
		want[b+".mlp"] = own{"MLPBlock", 0, 32_768, model.NoUnit}
		want[b+".mlp.fc"] = own{"Linear", 2_097_152, 2 * 2_097_152, model.NoUnit}
		want[b+".mlp.proj"] = own{"Linear", 2_097_152, 2 * 2_097_152, model.NoUnit}
	}
	if d := cmp.Diff(want, ownCounts(mods)); d != "" {
		t.Errorf("own counts (-hand +FlopModules):\n%s", d)
	}
	macs, flops, params := totals(mods, cfg.Layout())
	if d := cmp.Diff([3]int64{14_155_776, 28_614_656, 110_336}, [3]int64{macs, flops, params}); d != "" {
		t.Errorf("MACs, FLOPs, params (-hand +got):\n%s", d)
	}
}

// TestFlopModulesGPT2Totals: GPT-2 small (tied) on one 1024-token row.
// Per block a token costs 12·C² MACs in its Linears (qkv 3C², proj C²,
// fc and proj 4C² each) and the attention 2·T·C; the head C·V. The
// tied head adds no parameters: 124,439,808, the published count.
func TestFlopModulesGPT2Totals(t *testing.T) {
	cfg, err := Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	const B, T, C, V, L, NH = 1, 1024, 768, 50257, 12, 12
	N := int64(B * T)
	wantMACs := L*(12*C*C*N+2*T*C*N) + N*C*V
	wantFLOPs := 2*wantMACs + L*(2*5*N*C+B*NH*T*T+N*4*C) + 5*N*C
	mods := cfg.FlopModules(model.FlopShape{Batch: B, Seq: T})
	macs, flops, params := totals(mods, cfg.Layout())
	if d := cmp.Diff([3]int64{wantMACs, wantFLOPs, 124_439_808}, [3]int64{macs, flops, params}); d != "" {
		t.Errorf("MACs, FLOPs, params (-hand +got):\n%s", d)
	}
	head := mods[len(mods)-1]
	if d := cmp.Diff([]string{"wte.weight"}, head.Params); d != "" {
		t.Errorf("tied lm_head parameters (-want +got):\n%s", d)
	}
}
