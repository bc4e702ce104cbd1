package comm

import (
	"context"
	"fmt"
	"math"
)

// This file is the compressed all-reduce of DeepSpeed's 1-bit optimizers
// (deepspeed/runtime/comm/nccl.py and compressed.py, compressed_allreduce;
// 1-bit Adam, arXiv:2102.02888): an average of the ranks' buffers that
// sends one sign bit per element and one float32 scale per chunk, with
// error feedback on both sides, in two phases.
//
// With n ranks and a buffer x of N elements cut into the n chunks of the
// in-process cut, chunk j = [N·j/n, N·(j+1)/n) (DeepSpeed's callers pad N
// to a multiple of n·lcm(n, 8), which makes them equal), rank r holding
// worker error e_r (N elements) and server error f_r (chunk r's length):
//
//	worker (every rank r):
//	  x   = x + e_r                                   (float32)
//	  s_r = f32(‖x‖₂) / f32(√N)                       one scale per rank
//	  e_r = x − s_r·σ(x)                              σ(v) = +1 if v ≥ 0 (and −0, NaN), else −1
//	  phase 1, all_to_all: rank r sends rank j the packed σ of chunk j of x, and s_r
//	server (rank j, for its chunk):
//	  y   = Σ_r σ_r·(s_r · f32(1/n))  + f_j           the sum in rank order, float32
//	  t_j = f32(‖y‖₂) / f32(√len)                     one scale per chunk (0 for an empty chunk)
//	  f_j = y − t_j·σ(y)
//	  phase 2, all_gather: every rank receives every chunk's packed σ(y) and t_j
//	result (every rank): chunk j of x = t_j·σ(y_j)
//
// DeepSpeed computes the norms with torch.linalg.norm in float32; Norm2
// sums them in the order of torch's CPU kernel, with its fused
// multiply-adds. Everything else is the float32 arithmetic of the Python,
// in its order.
//
// On the wire the signs are packed 16 to a uint16 word (element i of a
// chunk is bit i%16 of word i/16, 1 for +1) and the scale follows as the
// two words of its float32 bits: a chunk's slot is ⌈⌈N/n⌉/16⌉ + 2 words,
// the same for every chunk (the longest chunk's). The words travel as
// 16-bit elements (BF16 buffers) that all_to_all and all_gather copy
// without reading them as numbers. Each rank therefore sends
// (n−1)/n·(N/8 + 4n) bytes per phase, against 2·(n−1)/n·4N for an fp32
// all-reduce: ≈ 1/32 of it for large N.

// ErrorFeedback is one buffer's compression errors on one rank: DeepSpeed's
// worker_error and server_error. They start at zero (NewErrorFeedback) and
// carry what compression lost from one call to the next.
type ErrorFeedback struct {
	Worker []float32 // the buffer's length
	Server []float32 // the length of the rank's chunk
}

// NewErrorFeedback is the zero errors of a buffer of n elements on rank
// rank of size ranks.
func NewErrorFeedback(n, size, rank int) ErrorFeedback {
	lo, hi := CompressedChunk(n, size, rank)
	return ErrorFeedback{Worker: make([]float32, n), Server: make([]float32, hi-lo)}
}

// CompressedChunk is chunk j = [n·j/size, n·(j+1)/size) of a buffer of n
// elements: the part rank j serves in CompressedAllReduce.
func CompressedChunk(n, size, j int) (lo, hi int) { return n * j / size, n * (j + 1) / size }

// CompressedWords is the number of 16-bit words of one chunk's slot on the
// wire, for a buffer of n elements on size ranks: its packed signs and its
// scale.
func CompressedWords(n, size int) int {
	longest := (n + size - 1) / size
	return (longest+15)/16 + 2
}

// Compressor runs CompressedAllReduce on one rank's communicator and keeps
// its scratch (the packed words and the server's sum) between calls, so
// that a step allocates nothing after the first. It is not safe for
// concurrent use.
type Compressor struct {
	c                        Comm
	send, recv, gsend, grecv []uint16
	y                        []float32
}

// NewCompressor is a Compressor over c.
func NewCompressor(c Comm) *Compressor { return &Compressor{c: c} }

// AllReduce replaces x, on every rank, by the compressed average of the
// ranks' x, updating the rank's error feedback ef (see the file's
// comment). It is a collective of two calls on the communicator
// (all_to_all, or all_gather where the Comm is no AllToAller, then
// all_gather); every rank passes a buffer of the same length. ef must be
// NewErrorFeedback's lengths for x; anything else is a programmer error
// and panics. With one rank it runs the same arithmetic without
// communicating.
func (z *Compressor) AllReduce(ctx context.Context, x []float32, ef *ErrorFeedback) error {
	n, me := z.c.Size(), z.c.Rank()
	N := len(x)
	lo, hi := CompressedChunk(N, n, me)
	if len(ef.Worker) != N || len(ef.Server) != hi-lo {
		panic(fmt.Sprintf("comm: compressed all-reduce of %d elements on rank %d of %d with errors of %d and %d (want %d and %d)",
			N, me, n, len(ef.Worker), len(ef.Server), N, hi-lo))
	}
	w := CompressedWords(N, n)

	// Worker: error feedback, scale, error, packed signs per chunk.
	for i, e := range ef.Worker {
		x[i] += e
	}
	s := scaleOf(x)
	z.send = grow(z.send, n*w)
	for j := range n {
		a, b := CompressedChunk(N, n, j)
		packErr(z.send[j*w:(j+1)*w], x[a:b], ef.Worker[a:b], s)
	}

	// Phase 1: rank j receives every rank's slot j.
	z.recv = grow(z.recv, n*w)
	if aa, ok := z.c.(AllToAller); ok {
		if err := aa.AllToAll(ctx, BF16(z.recv), BF16(z.send)).Wait(); err != nil {
			return fmt.Errorf("compressed all-reduce, phase 1 (all_to_all of the worker signs): %w", err)
		}
	} else {
		all := make([]uint16, n*n*w)
		if err := z.c.AllGather(ctx, BF16(all), BF16(z.send)).Wait(); err != nil {
			return fmt.Errorf("compressed all-reduce, phase 1 (all_gather of the worker signs): %w", err)
		}
		for r := range n {
			copy(z.recv[r*w:(r+1)*w], all[(r*n+me)*w:(r*n+me+1)*w])
		}
	}

	// Server: the average of the decompressed chunks, error feedback,
	// scale, error, packed signs.
	m := hi - lo
	z.y = growF32(z.y, m)
	y := z.y
	inv := float32(1 / float64(n))
	for r := range n {
		slot := z.recv[r*w : (r+1)*w]
		sr := slotScale(slot) * inv
		if r == 0 {
			unpackScaled(y, slot, sr)
		} else {
			addUnpackScaled(y, slot, sr)
		}
	}
	for i, f := range ef.Server {
		y[i] += f
	}
	t := scaleOf(y)
	z.gsend = grow(z.gsend, w)
	packErr(z.gsend, y, ef.Server, t)

	// Phase 2: every rank receives every chunk's signs and scale.
	z.grecv = grow(z.grecv, n*w)
	if err := z.c.AllGather(ctx, BF16(z.grecv), BF16(z.gsend)).Wait(); err != nil {
		return fmt.Errorf("compressed all-reduce, phase 2 (all_gather of the server signs): %w", err)
	}
	for j := range n {
		a, b := CompressedChunk(N, n, j)
		slot := z.grecv[j*w : (j+1)*w]
		unpackScaled(x[a:b], slot, slotScale(slot))
	}
	return nil
}

// scaleOf is DeepSpeed's torch.linalg.norm(x) / np.sqrt(x.numel()) in
// float32: f32(‖x‖₂) / f32(√n), 0 for an empty x.
func scaleOf(x []float32) float32 {
	if len(x) == 0 {
		return 0
	}
	return Norm2(x) / float32(math.Sqrt(float64(len(x))))
}

// normLanes is the width of torch's float32 vector on the CPU kernel the
// references ran (Vectorized<float> under AVX2).
const normLanes = 8

// Norm2 is ‖x‖₂ in float32 summed as torch 1.13's CPU norm kernel sums a
// contiguous float32 vector (binary_kernel_reduce_lastdim with
// norm_two_reduce_step): eight lanes, lane j accumulating
// acc_j = fma(x_i, x_i, acc_j) over i ≡ j (mod 8) in order, the lanes then
// added left to right, the elements past the last multiple of 8 fused
// into that sum one by one, and the square root rounded to float32. On
// lengths that are multiples of 8 — every buffer and chunk of DeepSpeed's
// padded compressed all-reduce — it is torch's value bit for bit (checked
// against torch.linalg.norm on the references' machine and against the
// scales of real DeepSpeed 1-bit Adam runs, TestCompressedDeepSpeedGPT);
// on other lengths torch's tail handling can differ by an ulp.
func Norm2(x []float32) float32 {
	var acc [normLanes]float32
	n := len(x) - len(x)%normLanes
	for i := 0; i < n; i += normLanes {
		v := x[i : i+normLanes]
		for j := range acc {
			acc[j] = fma32(v[j], v[j], acc[j])
		}
	}
	s := acc[0]
	for _, a := range acc[1:] {
		s += a
	}
	for _, v := range x[n:] {
		s = fma32(v, v, s)
	}
	return float32(math.Sqrt(float64(s)))
}

// fma32 is a·b + c rounded once to float32, as a float32 FMA instruction
// computes it. a·b is exact in float64; the sum is rounded to float64
// with its error kept (TwoSum), and where that float64 lies exactly
// halfway between two float32 values the error decides the side, so the
// double rounding never differs from a single one.
func fma32(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c)
	s := p + q
	bv := s - p
	e := (p - (s - bv)) + (q - bv)
	r := float32(s)
	if e == 0 || float64(r) == s {
		return r
	}
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if (float64(r)+float64(other))/2 == s && (e > 0) == (float64(other) > float64(r)) {
		return other
	}
	return r
}

// packErr is packSlot of x and s, and writes the compression error
// e = x − s·σ(x) (float32), 16 elements a word.
func packErr(slot []uint16, x, e []float32, s float32) {
	nw := len(slot) - 2
	clear(slot[:nw])
	e = e[:len(x)]
	for k := 0; k*16 < len(x); k++ {
		lo := k * 16
		blk, eb := x[lo:min(lo+16, len(x))], e[lo:min(lo+16, len(x))]
		var word uint16
		for b, v := range blk {
			if v < 0 {
				eb[b] = v + s
			} else {
				eb[b] = v - s
				word |= 1 << b
			}
		}
		slot[k] = word
	}
	bits := math.Float32bits(s)
	slot[nw], slot[nw+1] = uint16(bits), uint16(bits>>16)
}

// unpackScaled writes ±s into dst from the signs of slot.
func unpackScaled(dst []float32, slot []uint16, s float32) {
	for k := 0; k*16 < len(dst); k++ {
		lo := k * 16
		word := slot[k]
		for b := range dst[lo:min(lo+16, len(dst))] {
			if word&(1<<b) != 0 {
				dst[lo+b] = s
			} else {
				dst[lo+b] = -s
			}
		}
	}
}

// addUnpackScaled adds ±s to dst from the signs of slot.
func addUnpackScaled(dst []float32, slot []uint16, s float32) {
	for k := 0; k*16 < len(dst); k++ {
		lo := k * 16
		word := slot[k]
		for b := range dst[lo:min(lo+16, len(dst))] {
			if word&(1<<b) != 0 {
				dst[lo+b] += s
			} else {
				dst[lo+b] -= s
			}
		}
	}
}

// The sign σ(v) is DeepSpeed's v.sign().add_(1).bool().float().add_(-0.5).mul_(2.0):
// −1 for v < 0, +1 otherwise (0, −0 and NaN included), which is the bit
// !(v < 0) on the wire.

// packSlot writes the signs of x (bit i%16 of word i/16, 1 for +1) and the
// bits of scale s (low word first) into slot; unused bits are 0.
func packSlot(slot []uint16, x []float32, s float32) {
	nw := len(slot) - 2
	clear(slot[:nw])
	for i, v := range x {
		if !(v < 0) {
			slot[i/16] |= 1 << (i % 16)
		}
	}
	b := math.Float32bits(s)
	slot[nw], slot[nw+1] = uint16(b), uint16(b>>16)
}

// slotScale is the scale packSlot wrote.
func slotScale(slot []uint16) float32 {
	nw := len(slot) - 2
	return math.Float32frombits(uint32(slot[nw]) | uint32(slot[nw+1])<<16)
}

// PackSigns packs the signs of x as the wire does (bit i%16 of word i/16,
// 1 for v ≥ 0) into ⌈len(x)/16⌉ words; UnpackSigns is its inverse, ±1 per
// element. They are the wire format, exported for tests and tools.
func PackSigns(x []float32) []uint16 {
	slot := make([]uint16, (len(x)+15)/16+2)
	packSlot(slot, x, 0)
	return slot[:len(slot)-2]
}

// UnpackSigns writes ±1 into dst from words packed by PackSigns.
func UnpackSigns(dst []float32, words []uint16) {
	for i := range dst {
		if words[i/16]&(1<<(i%16)) != 0 {
			dst[i] = 1
		} else {
			dst[i] = -1
		}
	}
}

func grow(b []uint16, n int) []uint16 {
	if cap(b) < n {
		return make([]uint16, n)
	}
	return b[:n]
}

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}
