package estimate

import (
	"fmt"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
)

// Activations are what package gpt's forward keeps for its backward, and
// the backward's scratch, for a micro-batch of B sequences of T tokens,
// counted from its forward (N = B·T rows, C width, M MLP width, V
// vocabulary, NH heads, L blocks, A = B·NH·T² attention probabilities;
// float32 values, token ids int32):
//
//	each block  ln1, attention output, residual after attention, ln2  4·N·C
//	            fused q|k|v                                           3·N·C
//	            two LayerNorms' mean and rstd                         4·N
//	            MLP pre-activation and GELU output                    2·N·M
//	            softmax probabilities                                 A
//	residual stream: each block's input and the last block's output   (L+1)·N·C
//	head        ln_f output and its mean, rstd; logits; row max,
//	            log-sum-exp and loss                                  N·C + 2N + N·V + 3N
//	backward    d(residual), d(LayerNorm input), d(LayerNorm output),
//	scratch     d(attention output) 4·N·C; d(qkv) 3·N·C; d(MLP) N·M; d(scores) A
//	token ids   inputs and targets                                    8·N bytes
//
// Without checkpointing the model keeps L block sets; with it, one set
// that each block's forward and its recompute in backward share, and the
// residual stream is all that is kept of the blocks. With cpuCheckpoint
// the L saved block inputs are in pinned host memory (DeepSpeed's
// cpu_checkpointing). Every line is mem.Activations.
func Activations(c gpt.Config, B, T int, checkpoint, cpuCheckpoint bool) []Line {
	c = c.WithDefaults()
	return activations(c, B, T, int64(B*c.Heads)*int64(T)*int64(T), checkpoint, cpuCheckpoint)
}

// activations is Activations with A given (0 under sequence parallelism).
func activations(c gpt.Config, B, T int, A int64, checkpoint, cpuCheckpoint bool) []Line {
	N, C, M, V, L := int64(B*T), int64(c.Dim), int64(c.MLP), int64(c.Vocab), int64(c.Layers)
	block := 4*N*C + 3*N*C + 4*N + 2*N*M + A
	sets := L
	if checkpoint {
		sets = 1
	}
	f := func(what string, t mem.Tier, n int64) Line {
		return Line{What: what, Category: mem.Activations, Tier: t, Elements: n, Bytes: 4 * n}
	}
	saved := mem.Device
	if checkpoint && cpuCheckpoint {
		saved = mem.PinnedHost
	}
	return []Line{
		f(fmt.Sprintf("block activations (%d sets, 1 checkpointed)", L), mem.Device, sets*block),
		f(fmt.Sprintf("block inputs (%d, the residual stream)", L), saved, L*N*C),
		f("last block's output", mem.Device, N*C),
		f("head: ln_f, logits (N·V), loss", mem.Device, N*C+2*N+N*V+3*N),
		f("backward scratch", mem.Device, 7*N*C+N*M+A),
		{What: "token ids and targets (int32)", Category: mem.Activations, Tier: mem.Device, Bytes: 8 * N},
	}
}
