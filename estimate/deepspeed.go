package estimate

import (
	"fmt"
	"io"
	"strings"

	"github.com/dszero/dszero/model"
)

// Hardware is the setup DeepSpeed's estimators take: GPUs per node, nodes,
// and additional_buffer_factor, the slack they multiply host memory by.
type Hardware struct {
	GPUsPerNode  int     // num_gpus_per_node
	Nodes        int     // num_nodes
	BufferFactor float64 // additional_buffer_factor (DeepSpeed's default 1.5)
}

// DefaultBufferFactor is DeepSpeed's additional_buffer_factor default.
const DefaultBufferFactor = 1.5

// GPUs is the world size, Nodes × GPUsPerNode.
func (h Hardware) GPUs() int { return h.GPUsPerNode * h.Nodes }

func (h Hardware) check() error {
	switch {
	case h.GPUsPerNode < 1:
		return fmt.Errorf("estimate: num_gpus_per_node = %d, must be ≥ 1", h.GPUsPerNode)
	case h.Nodes < 1:
		return fmt.Errorf("estimate: num_nodes = %d, must be ≥ 1", h.Nodes)
	case h.GPUsPerNode > 1<<24 || h.Nodes > 1<<24 || h.GPUs() > 1<<24:
		return fmt.Errorf("estimate: %d nodes × %d GPUs, more than 2^24 in all", h.Nodes, h.GPUsPerNode)
	case !(h.BufferFactor > 0):
		return fmt.Errorf("estimate: additional_buffer_factor = %g, must be > 0", h.BufferFactor)
	}
	return nil
}

// Zero2Row is one line of estimate_zero2_model_states_mem_needs_all_cold.
type Zero2Row struct {
	OffloadOptimizer string `json:"offload_optimizer"` // "cpu" or "none"
	CPUBytes         int64  `json:"per_cpu_bytes"`
	GPUBytes         int64  `json:"per_gpu_bytes"`
}

// Zero3Row is one line of estimate_zero3_model_states_mem_needs_all_cold.
type Zero3Row struct {
	OffloadParam     string `json:"offload_param"`     // "cpu" or "none"
	OffloadOptimizer string `json:"offload_optimizer"` // "cpu" or "none"
	ZeroInit         bool   `json:"zero_init"`
	CPUBytes         int64  `json:"per_cpu_bytes"`
	GPUBytes         int64  `json:"per_gpu_bytes"`
}

// Zero2ModelStates is DeepSpeed's estimate_zero2_model_states_mem_needs
// (stage_1_and_2.py): host and per-GPU bytes for total parameters.
//
//	cpu_offload: gpu = 2Ψ                       cpu = Ψ · max(4·GPUs, 16) · f
//	otherwise:   gpu = 2Ψ + int(18Ψ / GPUs)     cpu = Ψ · 4 · GPUsPerNode · f
//
// 2 is the 16-bit parameters, 18 = 16-bit gradients 2 + fp32 gradients 4 +
// fp32 master 4 + Adam 8. The arithmetic is Python's: integer products,
// true division, then int() truncating toward zero.
func Zero2ModelStates(total int64, h Hardware, cpuOffload bool) (cpu, gpu int64) {
	gpus := int64(h.GPUs())
	if cpuOffload {
		return int64(float64(total*max(4*gpus, 16)) * h.BufferFactor), 2 * total
	}
	gpu = 2*total + int64(float64(18*total)/float64(gpus))
	return int64(float64(total*4*int64(h.GPUsPerNode)) * h.BufferFactor), gpu
}

// Zero3ModelStates is DeepSpeed's estimate_zero3_model_states_mem_needs
// (stage3.py). With g = 1/Nodes, L = 4·largest (a gathered layer):
//
//	offload param+optimizer: gpu = L
//	    cpu = Ψ·18·g·f (zero_init) | Ψ·max(4·GPUsPerNode, 18·g)·f
//	offload optimizer only:  gpu = L + int(2Ψ/GPUs)
//	    cpu = Ψ·16·g·f (zero_init) | Ψ·max(4·GPUsPerNode, 16·g)·f
//	no offload:              gpu = L + int(18Ψ/GPUs)
//	    cpu = largest·4·GPUsPerNode·f (zero_init) | Ψ·4·GPUsPerNode·f
//
// DeepSpeed has no row for parameter offload without optimizer offload.
func Zero3ModelStates(total, largest int64, h Hardware, cpuOffload, cpuOffloadParams, zeroInit bool) (cpu, gpu int64) {
	gpus, gpn := int64(h.GPUs()), int64(h.GPUsPerNode)
	g := 1 / float64(h.Nodes)
	f := h.BufferFactor
	layer := 4 * largest
	// maxTimes is Ψ · max(4·GPUsPerNode, k·g): Python's max keeps the int
	// when it is not smaller, and the product stays an int then.
	maxTimes := func(k float64) float64 {
		if float64(4*gpn) >= k*g {
			return float64(total * 4 * gpn)
		}
		return float64(total) * (k * g)
	}
	switch {
	case cpuOffload && cpuOffloadParams:
		if zeroInit {
			return int64(float64(total*18) * g * f), layer
		}
		return int64(maxTimes(18) * f), layer
	case cpuOffload:
		gpu = layer + int64(float64(2*total)/float64(gpus))
		if zeroInit {
			return int64(float64(total*16) * g * f), gpu
		}
		return int64(maxTimes(16) * f), gpu
	}
	gpu = layer + int64(float64(18*total)/float64(gpus))
	if zeroInit {
		return int64(float64(largest*4*gpn) * f), gpu
	}
	return int64(float64(total*4*gpn) * f), gpu
}

// Zero2Rows are the rows estimate_zero2_model_states_mem_needs_all_cold
// prints, in its order: optimizer offload, then none.
func Zero2Rows(total int64, h Hardware) []Zero2Row {
	var rows []Zero2Row
	for _, off := range []bool{true, false} {
		cpu, gpu := Zero2ModelStates(total, h, off)
		rows = append(rows, Zero2Row{OffloadOptimizer: onOff(off), CPUBytes: cpu, GPUBytes: gpu})
	}
	return rows
}

// Zero3Rows are the six rows estimate_zero3_model_states_mem_needs_all_cold
// prints, in its order: (optimizer, param) offload ∈ {(cpu, cpu), (cpu,
// none), (none, none)}, each with zero_init 1 then 0.
func Zero3Rows(total, largest int64, h Hardware) []Zero3Row {
	var rows []Zero3Row
	for _, opt := range []bool{true, false} {
		for _, par := range []bool{true, false} {
			if !opt && par {
				continue
			}
			for _, zi := range []bool{true, false} {
				cpu, gpu := Zero3ModelStates(total, largest, h, opt, par, zi)
				rows = append(rows, Zero3Row{OffloadParam: onOff(par), OffloadOptimizer: onOff(opt), ZeroInit: zi, CPUBytes: cpu, GPUBytes: gpu})
			}
		}
	}
	return rows
}

func onOff(cpu bool) string {
	if cpu {
		return "cpu"
	}
	return "none"
}

// optionDevice is the device as DeepSpeed's format_options writes it:
// f'{OffloadDeviceEnum.cpu:4}' is "cpu " (padded to 4, as in the
// published tables; Python ≥ 3.11 formats the enum as
// "OffloadDeviceEnum.cpu" instead).
func optionDevice(d string) string {
	if d == "cpu" {
		return "cpu "
	}
	return d
}

// WriteZero2 prints what estimate_zero2_model_states_mem_needs_all_cold
// (and _all_live, which only counts the parameters first) prints.
func WriteZero2(w io.Writer, total int64, h Hardware) {
	writeHeader(w, h, fmt.Sprintf("SW: Model with %dM total params.", millions(total)))
	for _, r := range Zero2Rows(total, h) {
		writeRow(w, r.CPUBytes, r.GPUBytes, "offload_optimizer="+optionDevice(r.OffloadOptimizer))
	}
}

// WriteZero3 prints what estimate_zero3_model_states_mem_needs_all_cold
// (and _all_live) prints.
func WriteZero3(w io.Writer, total, largest int64, h Hardware) {
	writeHeader(w, h, fmt.Sprintf("SW: Model with %dM total params, %dM largest layer params.", millions(total), millions(largest)))
	for _, r := range Zero3Rows(total, largest, h) {
		zi := 0
		if r.ZeroInit {
			zi = 1
		}
		writeRow(w, r.CPUBytes, r.GPUBytes, fmt.Sprintf("offload_param=%s, offload_optimizer=%s, zero_init=%d",
			optionDevice(r.OffloadParam), optionDevice(r.OffloadOptimizer), zi))
	}
}

func writeHeader(w io.Writer, h Hardware, sw string) {
	nodes, gpus := "node", "GPU"
	if h.Nodes > 1 {
		nodes = "nodes"
	}
	if h.GPUsPerNode > 1 {
		gpus = "GPUs"
	}
	fmt.Fprintf(w, "Estimated memory needed for params, optim states and gradients for a:\n"+
		"HW: Setup with %d %s, %d %s per node.\n%s\n", h.Nodes, nodes, h.GPUsPerNode, gpus, sw)
	fmt.Fprintln(w, "  per CPU  |  per GPU |   Options")
}

func writeRow(w io.Writer, cpu, gpu int64, options string) {
	fmt.Fprintf(w, " %7.2fGB | %6.2fGB | %s\n", float64(cpu)/(1<<30), float64(gpu)/(1<<30), options)
}

// millions is Python's int(n/1e6).
func millions(n int64) int64 { return int64(float64(n) / 1e6) }

// ModelToParams is DeepSpeed's model_to_params for a model given by its
// layout: the total number of parameters (shared tensors once: a tied
// head has no tensor of its own in the layout) and the largest layer, the
// module whose own parameters (recurse=False) hold the most elements. A
// module is a parameter name without its last component
// ("blocks.0.attn.qkv.weight" → "blocks.0.attn.qkv").
func ModelToParams(l *model.Layout) (total, largest int64, largestName string) {
	sums := map[string]int64{}
	var order []string
	for _, s := range l.Specs {
		mod := s.Name
		if i := strings.LastIndexByte(mod, '.'); i >= 0 {
			mod = mod[:i]
		}
		if _, ok := sums[mod]; !ok {
			order = append(order, mod)
		}
		sums[mod] += int64(s.Numel)
		total += int64(s.Numel)
	}
	for _, mod := range order { // first of equals, as DeepSpeed's max over modules()
		if sums[mod] > largest {
			largest, largestName = sums[mod], mod
		}
	}
	return total, largest, largestName
}
