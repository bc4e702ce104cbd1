package llama

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

type own struct {
	Class       string
	Extra       string
	MACs, FLOPs int64
	Unit        int
}

func ownCounts(mods []model.FlopModule) map[string]own {
	out := map[string]own{}
	var stack []string
	for _, m := range mods {
		stack = append(stack[:m.Depth], m.Name)
		out[strings.Join(stack[1:], ".")] = own{m.Class, m.Extra, m.MACs, m.FLOPs, m.Unit}
	}
	return out
}

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

// TestFlopModulesTinyLlamaByHand: tiny-llama (V 256, H 64, I 128, 2
// layers, 4 query heads and 2 kv heads of D 16) on B 2, T 16 (N 32):
//
//	q_proj, o_proj   N·H·nH·D  = 32·64·64        = 131,072 MACs
//	k_proj, v_proj   N·H·nKV·D = 32·64·32        = 65,536 MACs
//	self_attn (SDPA) q·kᵀ and w·v: 2·B·nH·T·T·D = 2·2·4·16·16·16 = 65,536 MACs
//	gate, up, down   N·H·I     = 32·64·128       = 262,144 MACs
//	act_fn           F.silu over (N, I)          = 4,096 FLOPs
//	rotary_emb       (1, D/2, 1) @ (1, 1, T)     = 8·16 = 128 MACs
//	lm_head          N·H·V     = 32·64·256       = 524,288 MACs
//	RMSNorms, embedding, residuals, RoPE rotation, gate product: 0
//
// Totals: MACs 2·1,245,184 + 128 + 524,288 = 3,014,784; FLOPs twice that
// plus 2·4,096 = 6,037,760; params 16,384 + 2·36,992 + 64 + 16,384 = 106,816.
func TestFlopModulesTinyLlamaByHand(t *testing.T) {
	cfg, err := Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	mods := cfg.FlopModules(model.FlopShape{Batch: 2, Seq: 16})
	const no = model.NoUnit
	lin := func(in, out int, macs int64) own {
		return own{"Linear", "in_features=" + strconv.Itoa(in) + ", out_features=" + strconv.Itoa(out) + ", bias=False", macs, 2 * macs, no}
	}
	norm := own{"LlamaRMSNorm", "(64,), eps=1e-05", 0, 0, no}
	want := map[string]own{
		"":                   {"LlamaForCausalLM", "", 0, 0, no},
		"model":              {"LlamaModel", "", 0, 0, no},
		"model.embed_tokens": {"Embedding", "256, 64", 0, 0, 0},
		"model.layers":       {"ModuleList", "", 0, 0, no},
		"model.norm":         norm,
		"model.rotary_emb":   {"LlamaRotaryEmbedding", "", 128, 256, no},
		"lm_head":            lin(64, 256, 524_288),
	}
	for l, unit := range map[string]int{"0": 1, "1": 2} {
		p := "model.layers." + l
		want[p] = own{"LlamaDecoderLayer", "", 0, 0, unit}
		want[p+".self_attn"] = own{"LlamaAttention", "", 65_536, 131_072, no}
		want[p+".self_attn.q_proj"] = lin(64, 64, 131_072)
		want[p+".self_attn.k_proj"] = lin(64, 32, 65_536)
		want[p+".self_attn.v_proj"] = lin(64, 32, 65_536)
		want[p+".self_attn.o_proj"] = lin(64, 64, 131_072)
		want[p+".mlp"] = own{"LlamaMLP", "", 0, 0, no}
		want[p+".mlp.gate_proj"] = lin(64, 128, 262_144)
		want[p+".mlp.up_proj"] = lin(64, 128, 262_144)
		want[p+".mlp.down_proj"] = lin(128, 64, 262_144)
		want[p+".mlp.act_fn"] = own{"SiLUActivation", "", 0, 4_096, no}
		want[p+".input_layernorm"] = norm
		want[p+".post_attention_layernorm"] = norm
	}
	if d := cmp.Diff(want, ownCounts(mods)); d != "" {
		t.Errorf("own counts (-hand +FlopModules):\n%s", d)
	}
	macs, flops, params := totals(mods, cfg.Layout())
	if d := cmp.Diff([3]int64{3_014_784, 6_037_760, 106_816}, [3]int64{macs, flops, params}); d != "" {
		t.Errorf("MACs, FLOPs, params (-hand +got):\n%s", d)
	}

	// Position ids per row make the rotary embedding compute B rows.
	rows := ownCounts(cfg.FlopModules(model.FlopShape{Batch: 2, Seq: 16, RowPositions: true}))
	if got := rows["model.rotary_emb"].MACs; got != 2*128 {
		t.Errorf("rotary_emb MACs with row positions = %d, want 256", got)
	}
}

// TestFlopModulesFamilies: the Qwen3 q/k norms sit in the attention with
// head_dim's shape, Qwen2's q/k/v carry biases and o does not, a padding
// token shows in the embedding, and a tied head names embed_tokens.
func TestFlopModulesFamilies(t *testing.T) {
	q3, err := Preset("tiny-qwen3")
	if err != nil {
		t.Fatal(err)
	}
	m := ownCounts(q3.FlopModules(model.FlopShape{Batch: 1, Seq: 4}))
	if d := cmp.Diff(own{"Qwen3RMSNorm", "(32,), eps=1e-06", 0, 0, model.NoUnit}, m["model.layers.1.self_attn.k_norm"]); d != "" {
		t.Errorf("qwen3 k_norm (-want +got):\n%s", d)
	}
	q2, err := Preset("tiny-qwen2")
	if err != nil {
		t.Fatal(err)
	}
	pad := 5
	q2.PadTokenID = &pad
	mods := q2.FlopModules(model.FlopShape{Batch: 1, Seq: 4})
	m = ownCounts(mods)
	for name, want := range map[string]string{
		"model.layers.0.self_attn.q_proj": "in_features=64, out_features=64, bias=True",
		"model.layers.0.self_attn.v_proj": "in_features=64, out_features=32, bias=True",
		"model.layers.0.self_attn.o_proj": "in_features=64, out_features=64, bias=False",
		"model.embed_tokens":              "256, 64, padding_idx=5",
	} {
		if got := m[name].Extra; got != want {
			t.Errorf("%s extra_repr = %q, want %q", name, got, want)
		}
	}
	if d := cmp.Diff([]string{"model.embed_tokens.weight"}, mods[len(mods)-1].Params); d != "" {
		t.Errorf("tied lm_head parameters (-want +got):\n%s", d)
	}
	if _, _, params := totals(mods, q2.Layout()); params != int64(q2.NumParams()) {
		t.Errorf("distinct params %d, the layout has %d", params, q2.NumParams())
	}
}

// TestFlopModulesLlama32Totals: Llama-3.2-1B (tied; 1,235,814,400
// parameters as published) on one 2048-token row. Per layer a token
// costs H·(nH·D + 2·nKV·D) + nH·D·H + 3·H·I MACs in the Linears and
// 2·nH·T·D in the attention; the head H·V; RoPE D/2 per position.
func TestFlopModulesLlama32Totals(t *testing.T) {
	cfg, err := Preset("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	const T, H, I, L, nH, nKV, D, V = 2048, 2048, 8192, 16, 32, 8, 64, 128256
	perToken := int64(H*(nH*D+2*nKV*D) + nH*D*H + 3*H*I + 2*nH*T*D)
	wantMACs := L*T*perToken + T*H*V + D/2*T
	wantFLOPs := 2*wantMACs + L*T*I // silu
	macs, flops, params := totals(cfg.FlopModules(model.FlopShape{Batch: 1, Seq: T}), cfg.Layout())
	if d := cmp.Diff([3]int64{wantMACs, wantFLOPs, 1_235_814_400}, [3]int64{macs, flops, params}); d != "" {
		t.Errorf("MACs, FLOPs, params (-hand +got):\n%s", d)
	}
}

// TestFlopModulesSeqParallel: under Ulysses (FlopShape.SeqParallel 2,
// Seq the rank's 8 of 16 tokens) each attention module counts SDPA on
// heads/2 = 2 of tiny-llama's 4 heads over all 16 tokens, half the whole
// sequence's; the linears count the rank's 8 tokens.
func TestFlopModulesSeqParallel(t *testing.T) {
	cfg, err := Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	whole := ownCounts(cfg.FlopModules(model.FlopShape{Batch: 2, Seq: 16}))
	rank := ownCounts(cfg.FlopModules(model.FlopShape{Batch: 2, Seq: 8, SeqParallel: 2}))
	D := int64(cfg.WithDefaults().HeadDim)
	// q·kᵀ and w·v: B·h·T·T·D each, B 2, h 2, T 16
	if got, want := rank["model.layers.0.self_attn"].MACs, 2*(2*2*16*16*D); got != want || 2*got != whole["model.layers.0.self_attn"].MACs {
		t.Errorf("attention MACs per rank %d, want %d (half of %d)", got, want, whole["model.layers.0.self_attn"].MACs)
	}
	if got, w := rank["model.layers.0.self_attn.q_proj"].MACs, whole["model.layers.0.self_attn.q_proj"].MACs; 2*got != w {
		t.Errorf("q_proj MACs per rank %d, want half of %d", got, w)
	}
}
