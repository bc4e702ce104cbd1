package main

import (
	"flag"
	"fmt"
	"strings"
)

// mathFlag is --math: which float32 kernels the model computes with.
// "fast" (the default of dszero train) is the fast path (gpt's
// Options.Fast: attention as GEMMs, float32 exp and tanh, fused bias
// passes), within 1e-5 of the exact losses; "exact" keeps the kernels
// that reproduce PyTorch's reference runs, which dszero conformance always
// uses. 16-bit emulation (bf16/fp16 configs) is exact either way.
type mathFlag struct{ fast *bool }

var _ flag.Value = mathFlag{}

// mathUsage is --math's help line.
const mathUsage = "float32 kernels, `fast|exact`: fast (attention as GEMMs, float32 exp/tanh, fused passes; losses within 1e-5 of exact) or exact (PyTorch's rounding order, what dszero conformance runs); bf16/fp16 emulation is always exact"

func (f mathFlag) String() string {
	if f.fast == nil || *f.fast {
		return "fast"
	}
	return "exact"
}

func (f mathFlag) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fast":
		*f.fast = true
	case "exact":
		*f.fast = false
	default:
		return fmt.Errorf("%q is not a kind of math: give fast or exact", s)
	}
	return nil
}

// threadsUsage is dszero train's --threads help line: N threads per rank
// for both the GEMMs and the rest of the step.
const threadsUsage = "threads per rank: OpenBLAS's threads (process-wide) and the rank's worker pool for the element-wise layers, attention softmax, cross-entropy and AdamW (default: OpenBLAS's own; the pool: the cores divided among the in-process ranks). Ranks × threads should not exceed the cores"
