// Package vecloop cuts a slice's work for an assembly kernel that runs
// eight float32 lanes at a time: the longest multiple-of-8 prefix goes to
// the kernel, in blocks, and the caller's scalar code takes the rest.
//
// The blocks exist because assembly cannot be preempted: a kernel over a
// partition of 10^8 elements would keep the scheduler and the garbage
// collector waiting for tens of milliseconds, one over Block elements
// (256 KiB of each stream) waits for microseconds. A kernel that carries
// state from block to block (lane accumulators) stores and reloads it
// between calls, which changes no bit, so results do not depend on Block.
package vecloop

// Block is the most elements one kernel call gets.
const Block = 1 << 16

// Prefix runs block(i, n) over the longest multiple-of-8 prefix of
// [0, length) in blocks [i, i+n) of at most Block elements, in order, and
// returns the prefix's end, where the scalar code must continue: 0 when
// the kernel cannot run (enabled false: no AVX2/FMA, or a build without
// the assembly) or length is below 8.
func Prefix(enabled bool, length int, block func(i, n int)) int {
	if !enabled || length < 8 {
		return 0
	}
	end := length &^ 7
	for i := 0; i < end; i += Block {
		block(i, min(Block, end-i))
	}
	return end
}
