package estimate

import (
	"fmt"
	"io"
	"strings"

	"github.com/dszero/dszero/mem"
)

// WriteText writes the report as tables for people: DeepSpeed's
// estimators exactly as DeepSpeed prints them, then dszero's estimate.
func WriteText(w io.Writer, r Report) {
	h := r.Hardware
	fmt.Fprintf(w, "%s: %s parameters", r.Model, num(r.Params))
	switch {
	case r.LargestLayerName != "":
		fmt.Fprintf(w, ", largest layer %s (%s)", r.LargestLayerName, num(r.LargestLayer))
	case r.LargestLayer > 0:
		fmt.Fprintf(w, ", largest layer %s", num(r.LargestLayer))
	}
	fmt.Fprintf(w, "; %d %s × %d GPU(s) per node\n\n", h.Nodes, plural(h.Nodes, "node", "nodes"), h.GPUsPerNode)

	fmt.Fprintf(w, "DeepSpeed's estimators, as DeepSpeed prints them (model states only: no activations, no buffers)\n\n")
	args := fmt.Sprintf("num_gpus_per_node=%d, num_nodes=%d", h.GPUsPerNode, h.Nodes)
	if h.BufferFactor != DefaultBufferFactor {
		args += fmt.Sprintf(", additional_buffer_factor=%g", h.BufferFactor)
	}
	if r.Live {
		fmt.Fprintf(w, ">>> estimate_zero2_model_states_mem_needs_all_live(model, %s)\n", args)
	} else {
		fmt.Fprintf(w, ">>> estimate_zero2_model_states_mem_needs_all_cold(total_params=%d, %s)\n", r.Params, args)
	}
	WriteZero2(w, r.Params, h)
	fmt.Fprintln(w)
	switch {
	case r.Live:
		fmt.Fprintf(w, ">>> estimate_zero3_model_states_mem_needs_all_live(model, %s)\n", args)
		WriteZero3(w, r.Params, r.LargestLayer, h)
	case r.LargestLayer > 0:
		fmt.Fprintf(w, ">>> estimate_zero3_model_states_mem_needs_all_cold(total_params=%d, largest_layer_params=%d, %s)\n", r.Params, r.LargestLayer, args)
		WriteZero3(w, r.Params, r.LargestLayer, h)
	default:
		fmt.Fprintf(w, "(ZeRO-3's estimator needs the largest layer: give --largest-layer N, the most parameters one module holds)\n")
	}
	if r.Dszero != nil {
		fmt.Fprintln(w)
		writeDszero(w, r.Dszero)
	}
}

func writeDszero(w io.Writer, e *Estimate) {
	opt := fmt.Sprintf("%s (%d fp32 state tensors)", e.Optimizer, e.OptimizerStates)
	if e.OptimizerAssumed {
		opt = "no optimizer block, AdamW assumed (2 fp32 state tensors)"
	}
	fmt.Fprintf(w, "dszero, per rank: %s on %d rank(s), ZeRO stage %d, %s, %s\n", e.Config, e.Ranks, e.Stage, e.Precision, opt)
	fmt.Fprintf(w, "  offload_optimizer %s, offload_param %s; dszero's CPU backend keeps every value in float32 (4 bytes), 16-bit ones too\n\n",
		e.OffloadOptimizer, e.OffloadParam)

	cats := []mem.Category{mem.Params16, mem.MasterParams, mem.Grads, mem.OptimState}
	fmt.Fprintf(w, "%-18s", "By stage")
	for _, c := range cats {
		fmt.Fprintf(w, " %13s", c)
	}
	fmt.Fprintf(w, " %11s  │ %11s %11s %11s\n", "buffers", "device", "pinned_host", "nvme")
	for _, s := range e.Stages {
		label := fmt.Sprintf("  stage %d", s.Stage)
		if s.Stage == e.Stage {
			label += " (config)"
		}
		fmt.Fprintf(w, "%-18s", label)
		for _, c := range cats {
			var n int64
			for _, l := range s.States {
				if l.Category == c {
					n += l.Bytes
				}
			}
			fmt.Fprintf(w, " %13s", bytesOrDash(n))
		}
		b := sum(s.Buffers)
		fmt.Fprintf(w, " %11s  │ %11s %11s %11s\n", bytesOrDash(b.Device+b.PinnedHost+b.NVMe),
			bytesOrDash(s.Total.Device), bytesOrDash(s.Total.PinnedHost), bytesOrDash(s.Total.NVMe))
	}
	fmt.Fprintf(w, "  stages 1-2: the flat buffer padded to %s (a multiple of 2N = %d), %s per partition; stage 3: %s per rank (Σ ceil(numel/N))\n\n",
		num(e.Padded), 2*e.Ranks, num(e.Partition), num(e.Stage3Numel))

	fmt.Fprintf(w, "Buffers at stage %d\n", e.Stage)
	for _, l := range e.Stages[e.Stage].Buffers {
		fmt.Fprintf(w, "  %11s  %-12s %s\n", bytesOrDash(l.Bytes), where(l), l.What)
	}
	if e.Activations != nil {
		fmt.Fprintf(w, "\nActivations for a micro-batch of %d × %d tokens\n", e.MicroBatch, e.SeqLen)
		fmt.Fprintf(w, "  %-46s %11s %12s\n", "", "kept", "checkpointed")
		for i, l := range e.Activations {
			c := e.Checkpoint[i]
			tier := ""
			if c.Tier != mem.Device {
				tier = " (" + c.Tier.String() + ")"
			}
			fmt.Fprintf(w, "  %-46s %11s %12s%s\n", l.What, bytesOrDash(l.Bytes), bytesOrDash(c.Bytes), tier)
		}
		a, c := sum(e.Activations), sum(e.Checkpoint)
		fmt.Fprintf(w, "  %-46s %11s %12s\n", "total", mem.FormatBytes(a.Device+a.PinnedHost), mem.FormatBytes(c.Device+c.PinnedHost))
	}
	how := ""
	if e.Activations != nil {
		how = ", without activation checkpointing"
		if e.Checkpoints {
			how = ", with activation checkpointing"
		}
	}
	fmt.Fprintf(w, "\nTotal per rank at stage %d%s: device %s", e.Stage, how, mem.FormatBytes(e.Total.Device))
	if e.Total.PinnedHost > 0 {
		fmt.Fprintf(w, ", pinned host %s", mem.FormatBytes(e.Total.PinnedHost))
	}
	if e.Total.NVMe > 0 {
		fmt.Fprintf(w, ", NVMe %s", mem.FormatBytes(e.Total.NVMe))
	}
	fmt.Fprintln(w)
	for _, n := range e.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// where is a buffer's category, and its tier when not the device.
func where(l Line) string {
	s := l.Category.String()
	if l.Tier != mem.Device {
		s += "/" + l.Tier.String()
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// String is the report as WriteText writes it.
func (r Report) String() string {
	var b strings.Builder
	WriteText(&b, r)
	return b.String()
}
