package gpt

import (
	"fmt"

	"github.com/dszero/dszero/model"
)

var _ model.FlopCounter = Config{}

// FlopModules lists the modules of this GPT's PyTorch twin, the
// reference harness's TinyGPT (shared/reference/harness/common.py, the
// model DeepSpeed trained for the conformance references), with what
// DeepSpeed's FLOPS profiler counts in each for a (B, T) micro-batch.
// The names are the canonical parameter names' module paths, the
// classes TinyGPT's:
//
//	TinyGPT
//	  wte      Embedding(V, C)                     0
//	  wpe      Embedding(Context, C)               0
//	  blocks   ModuleList
//	    l      Block                               unit 1+l
//	      ln1  LayerNorm((C,))                     5·N·C FLOPs
//	      attn CausalSelfAttention                 q @ kᵀ and att @ v: 2·N·T·C MACs; softmax B·NH·T² FLOPs
//	        qkv  Linear(C, 3C)                     N·C·3C MACs
//	        proj Linear(C, C)                      N·C·C MACs
//	      ln2  LayerNorm((C,))                     5·N·C FLOPs
//	      mlp  MLPBlock                            gelu: N·M FLOPs
//	        fc   Linear(C, M)                      N·C·M MACs
//	        proj Linear(M, C)                      N·M·C MACs
//	  ln_f     LayerNorm((C,))                     5·N·C FLOPs
//	  lm_head  Linear(C, V, bias=False)            N·C·V MACs (tied: wte's weight)
//
// with N = B·T and every Linear's FLOPs twice its MACs. The 1/√HS score
// scale, the causal masked_fill, the residual sums, the embedding sum
// and the cross-entropy loss are operators DeepSpeed does not wrap and
// cost nothing; the causal mask does not halve the attention's count.
// The embeddings and the head are not units of their own in the tree (a
// unit covers wte and wpe together, or ln_f, lm_head and the loss), so
// only the blocks map onto units. c must be valid.
func (c Config) FlopModules(s model.FlopShape) []model.FlopModule {
	c = c.WithDefaults()
	B, T, C, M, V, NH := s.Batch, s.Seq, c.Dim, c.MLP, c.Vocab, c.Heads
	N := B * T
	eps := float64(c.Eps)
	var t model.FlopTree
	t.Enter(model.Container("", "TinyGPT"))
	t.Add(model.Embedding("wte", "wte.weight", V, C, -1))
	t.Add(model.Embedding("wpe", "wpe.weight", c.Context, C, -1))
	t.Enter(model.Container("blocks", "ModuleList"))
	for l := range c.Layers {
		p := fmt.Sprintf("blocks.%d.", l)
		blk := model.Container(fmt.Sprint(l), "Block")
		blk.Unit = 1 + l
		t.Enter(blk)
		t.Add(model.LayerNorm("ln1", p+"ln1", N, C, eps, 32))
		attn := model.Container("attn", "CausalSelfAttention")
		// q @ kᵀ: q (B, NH, T, HS) times kᵀ's T columns; att @ v: att
		// (B, NH, T, T) times v's HS columns; each N·T·C. Under Ulysses
		// NH/sp heads over the whole sp·T tokens (FlopShape.Attention).
		h, Ta := s.Attention(NH)
		scores := int64(B) * int64(h) * int64(Ta) * int64(Ta)
		attn.MACs = model.MatmulMACs(int64(B)*int64(h)*int64(Ta)*int64(C/NH), Ta) + model.MatmulMACs(scores, C/NH)
		attn.FLOPs = 2*attn.MACs + scores // softmax
		t.Enter(attn)
		t.Add(model.Linear("qkv", p+"attn.qkv", N, C, 3*C, true))
		t.Add(model.Linear("proj", p+"attn.proj", N, C, C, true))
		t.Leave()
		t.Add(model.LayerNorm("ln2", p+"ln2", N, C, eps, 32))
		mlp := model.Container("mlp", "MLPBlock")
		mlp.FLOPs = int64(N) * int64(M) // gelu
		t.Enter(mlp)
		t.Add(model.Linear("fc", p+"mlp.fc", N, C, M, true))
		t.Add(model.Linear("proj", p+"mlp.proj", N, M, C, true))
		t.Leave()
		t.Leave()
	}
	t.Leave()
	t.Add(model.LayerNorm("ln_f", "ln_f", N, C, eps, 32))
	head := model.Linear("lm_head", "lm_head", N, C, V, false)
	if c.Tied {
		head.Params = []string{"wte.weight"}
	}
	t.Add(head)
	t.Leave()
	return t.Modules()
}
