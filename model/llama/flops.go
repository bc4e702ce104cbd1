package llama

import (
	"fmt"

	"github.com/dszero/dszero/model"
)

var _ model.FlopCounter = Config{}

// classPrefix is the family's prefix of the transformers class names:
// LlamaForCausalLM, Qwen2Attention, MistralRMSNorm, ...
var classPrefix = [...]string{Llama: "Llama", Qwen2: "Qwen2", Qwen3: "Qwen3", Mistral: "Mistral"}

// FlopModules lists the modules of the transformers model (its
// modeling_<family>.py, e.g. LlamaForCausalLM) with what DeepSpeed's
// FLOPS profiler counts in each for a (B, T) micro-batch, under
// transformers' module names and classes, with the default "sdpa"
// attention on torch ≥ 2:
//
//	LlamaForCausalLM
//	  model LlamaModel
//	    embed_tokens  Embedding(V, H)                          0; unit 0
//	    layers        ModuleList
//	      l           LlamaDecoderLayer                        unit 1+l
//	        self_attn LlamaAttention                           SDPA: 2·B·nH·T²·D MACs
//	          q_proj  Linear(H, nH·D)                          N·H·nH·D MACs
//	          k_proj, v_proj Linear(H, nKV·D)                  N·H·nKV·D MACs each
//	          o_proj  Linear(nH·D, H)                          N·nH·D·H MACs
//	          q_norm, k_norm Qwen3RMSNorm((D,))                (Qwen3) 0
//	        mlp       LlamaMLP
//	          gate_proj, up_proj Linear(H, I)                  N·H·I MACs each
//	          down_proj Linear(I, H)                           N·I·H MACs
//	          act_fn  SiLUActivation                           F.silu: N·I FLOPs
//	        input_layernorm, post_attention_layernorm LlamaRMSNorm((H,))   0
//	    norm          LlamaRMSNorm((H,))                       0
//	    rotary_emb    LlamaRotaryEmbedding                     inv_freq @ positions: R·(D/2)·T MACs
//	  lm_head         Linear(H, V, bias=False)                 N·H·V MACs (tied: embed_tokens' weight)
//
// with N = B·T, every matmul's FLOPs twice its MACs, and R the rows of
// the position ids: B when the batch carries them (FlopShape.RowPositions),
// else 1 (HF builds them as (1, T)). What HF computes with unwrapped
// operators costs nothing in DeepSpeed's count: RMSNorm (pow, mean,
// rsqrt and *), RoPE's rotation of q and k, SwiGLU's gate product, the
// residual sums, repeat_kv, the causal or sliding-window mask, and the
// loss. The SDPA count covers the full T×T scores whatever the mask, and
// is the same with GQA (it reads only q's shape and the keys' length).
// Under attn_implementation="eager" DeepSpeed counts the two
// torch.matmul calls alike and adds the softmax, B·nH·T² FLOPs. c must
// be valid.
func (c Config) FlopModules(s model.FlopShape) []model.FlopModule {
	c = c.WithDefaults()
	B, T := s.Batch, s.Seq
	N := B * T
	H, I, Q, KV, D, V := c.Hidden, c.Intermediate, c.qDim(), c.kvDim(), c.HeadDim, c.Vocab
	pre := classPrefix[c.Family]
	norm := func(name, prefix string, dim int) model.FlopModule {
		m := model.Container(name, pre+"RMSNorm")
		m.Params = []string{prefix + ".weight"}
		m.Extra = fmt.Sprintf("(%d,), eps=%s", dim, model.PyFloat(c.Eps, 64))
		return m
	}
	pad := -1
	if c.PadTokenID != nil {
		pad = *c.PadTokenID
	}

	var t model.FlopTree
	t.Enter(model.Container("", c.Family.Architecture()))
	t.Enter(model.Container("model", pre+"Model"))
	emb := model.Embedding("embed_tokens", "model.embed_tokens.weight", V, H, pad)
	emb.Unit = 0
	t.Add(emb)
	t.Enter(model.Container("layers", "ModuleList"))
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		layer := model.Container(fmt.Sprint(l), c.Family.DecoderLayerClass())
		layer.Unit = 1 + l
		t.Enter(layer)

		attn := model.Container("self_attn", pre+"Attention")
		h, Ta := s.Attention(c.Heads) // Ulysses: heads/sp over sp·T
		attn.MACs = model.SDPAMACs(B, h, Ta, D, Ta, D)
		attn.FLOPs = 2 * attn.MACs
		t.Enter(attn)
		t.Add(model.Linear("q_proj", p+"self_attn.q_proj", N, H, Q, c.qkvBias()))
		t.Add(model.Linear("k_proj", p+"self_attn.k_proj", N, H, KV, c.qkvBias()))
		t.Add(model.Linear("v_proj", p+"self_attn.v_proj", N, H, KV, c.qkvBias()))
		t.Add(model.Linear("o_proj", p+"self_attn.o_proj", N, Q, H, c.oBias()))
		if c.qkNorm() {
			t.Add(norm("q_norm", p+"self_attn.q_norm", D))
			t.Add(norm("k_norm", p+"self_attn.k_norm", D))
		}
		t.Leave()

		t.Enter(model.Container("mlp", pre+"MLP"))
		t.Add(model.Linear("gate_proj", p+"mlp.gate_proj", N, H, I, c.mlpBias()))
		t.Add(model.Linear("up_proj", p+"mlp.up_proj", N, H, I, c.mlpBias()))
		t.Add(model.Linear("down_proj", p+"mlp.down_proj", N, I, H, c.mlpBias()))
		act := model.Container("act_fn", "SiLUActivation")
		act.FLOPs = int64(N) * int64(I)
		t.Add(act)
		t.Leave()

		t.Add(norm("input_layernorm", p+"input_layernorm", H))
		t.Add(norm("post_attention_layernorm", p+"post_attention_layernorm", H))
		t.Leave()
	}
	t.Leave()
	t.Add(norm("norm", "model.norm", H))
	rows := 1
	if s.RowPositions {
		rows = B
	}
	rope := model.Container("rotary_emb", pre+"RotaryEmbedding")
	rope.MACs = model.MatmulMACs(int64(rows)*int64(D/2), T) // (R, D/2, 1) @ (R, 1, T)
	rope.FLOPs = 2 * rope.MACs
	t.Add(rope)
	t.Leave()
	head := model.Linear("lm_head", "lm_head", N, H, V, false)
	if c.Tied {
		head.Params = []string{"model.embed_tokens.weight"}
	}
	t.Add(head)
	t.Leave()
	return t.Modules()
}
