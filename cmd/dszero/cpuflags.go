package main

import (
	"flag"
	"fmt"
	"strings"
)

// mathFlag is --math: which kernels the model computes with. "fast" (the
// default of dszero train) is the fast path (gpt's Options.Fast:
// attention as GEMMs, float32 exp and tanh, fused bias passes), within
// 1e-5 of the exact losses in fp32; with a bf16/fp16 config it computes
// each op in float32 through OpenBLAS and rounds its output once, as a
// GPU's 16-bit kernels do. "exact" keeps the kernels that reproduce
// PyTorch's reference runs (in bf16, torch 1.13's CPU bf16 kernels bit
// for bit, several times slower), which dszero conformance always uses.
type mathFlag struct{ fast *bool }

var _ flag.Value = mathFlag{}

// mathUsage is --math's help line.
const mathUsage = "model kernels, `fast|exact`: fast (attention as GEMMs, float32 exp/tanh, fused passes; fp32 losses within 1e-5 of exact; bf16/fp16 as float32 through OpenBLAS rounded once per op, like GPU kernels) or exact (PyTorch's rounding order and, in bf16, torch's CPU bf16 kernels bit for bit, several times slower: what dszero conformance runs, for DeepSpeed-on-CPU bits)"

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
