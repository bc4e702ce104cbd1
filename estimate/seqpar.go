package estimate

import (
	"fmt"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
)

// ActivationsSP is Activations for one rank of a DeepSpeed-Ulysses group
// of sp ranks (sequence_parallel_size; model/gpt's ulysses.go) taking
// micro-batches of B sequences of T tokens. The rank holds Tl = T/sp
// tokens, so every line of Activations is that of (B, Tl) — 1/sp of it —
// except the attention probabilities, which are of the rank's NH/sp heads
// over all T tokens (A = B·(NH/sp)·T², also 1/sp of one rank's), kept
// beside the heads' q|k|v over all tokens; plus the exchange buffers:
//
//	each block  q|k|v of the local heads, all tokens   3·N·C/sp… = 3·Nl·C
//	            softmax probabilities of the local heads A
//	backward    attention output and its gradient Nl·C; d(q|k|v) 3·Nl·C;
//	scratch     d(scores) A; key/value transposes Nl·C
//	exchange    all_to_all send and receive           2·3·Nl·C
//
// (Nl = B·Tl.) With sp ≤ 1 it is Activations.
func ActivationsSP(c gpt.Config, B, T, sp int, checkpoint, cpuCheckpoint bool) []Line {
	c = c.WithDefaults()
	if sp <= 1 {
		return Activations(c, B, T, checkpoint, cpuCheckpoint)
	}
	Tl := T / sp
	lines := activations(c, B, Tl, 0, checkpoint, cpuCheckpoint)
	Nl, C, L := int64(B*Tl), int64(c.Dim), int64(c.Layers)
	A := int64(B*c.Heads/sp) * int64(T) * int64(T)
	sets := L
	if checkpoint {
		sets = 1
	}
	f := func(what string, n int64) Line {
		return Line{What: what, Category: mem.Activations, Tier: mem.Device, Elements: n, Bytes: 4 * n}
	}
	return append(lines,
		f(fmt.Sprintf("Ulysses attention, %d of %d heads × %d tokens", c.Heads/sp, c.Heads, T), sets*(3*Nl*C+A)),
		f("Ulysses backward scratch, all_to_all buffers", Nl*C+3*Nl*C+A+Nl*C+2*3*Nl*C),
	)
}

// seqParallelNote compares a rank's activations under sequence
// parallelism with those of a rank holding whole sequences.
func seqParallelNote(c gpt.Config, B, T, sp int, checkpoint, cpu bool) string {
	a, one := sum(ActivationsSP(c, B, T, sp, checkpoint, cpu)), sum(Activations(c, B, T, checkpoint, cpu))
	got, base := a.Device+a.PinnedHost, one.Device+one.PinnedHost
	ex := int64(4 * sp * 3 * B * (T / sp) * c.WithDefaults().Dim) // sp × the send buffer, in bytes
	return fmt.Sprintf("sequence_parallel_size %d (Ulysses): each rank holds %d of the %d tokens of its samples and attends with %d of the %d heads: activations %s per rank, %s with whole sequences (%.2f×, 1/sp = %.2f); ZeRO partitions over all ranks (DeepSpeed's sequence-data-parallel group); a backend without a native all_to_all adds an all_gather scratch of %s (comm)",
		sp, T/sp, T, c.WithDefaults().Heads/sp, c.WithDefaults().Heads, mem.FormatBytes(got), mem.FormatBytes(base), float64(got)/float64(base), 1/float64(sp), mem.FormatBytes(ex))
}
