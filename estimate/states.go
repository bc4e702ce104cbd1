package estimate

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
)

// Widths are the bytes per parameter of each model state.
type Widths struct {
	Params int // working parameters, the ones forward and backward read
	Grads  int // gradients
	Master int // fp32 master parameters kept apart from the working ones
	Optim  int // optimizer state: 4 per fp32 state tensor (Adam: 8)
}

// PaperAdam is the ZeRO paper's mixed-precision Adam: fp16 parameters and
// gradients (2 + 2) and K = 12 bytes of optimizer state (fp32 master 4,
// momentum 4, variance 4).
var PaperAdam = Widths{Params: 2, Grads: 2, Master: 4, Optim: 8}

// K is the paper's K: the bytes per parameter the optimizer step owns.
func (w Widths) K() int { return w.Master + w.Optim }

// PerRank is the ZeRO paper's model-state bytes per rank (§5, Figure 1)
// for psi parameters over n data-parallel ranks:
//
//	stage 0 (baseline)  (P + G + K)·Ψ
//	stage 1 (P_os)      (P + G)·Ψ + K·Ψ/N
//	stage 2 (P_os+g)    P·Ψ + (G + K)·Ψ/N
//	stage 3 (P_os+g+p)  (P + G + K)·Ψ/N
//
// with P, G = Params, Grads bytes. Another stage, or n < 1, is an error.
func (w Widths) PerRank(stage int, psi float64, n int) (float64, error) {
	if n < 1 {
		return 0, fmt.Errorf("estimate: %d ranks: want at least 1", n)
	}
	P, G, K, N := float64(w.Params), float64(w.Grads), float64(w.K()), float64(n)
	switch stage {
	case 0:
		return (P + G + K) * psi, nil
	case 1:
		return (P+G)*psi + K*psi/N, nil
	case 2:
		return P*psi + (G+K)*psi/N, nil
	case 3:
		return (P + G + K) * psi / N, nil
	}
	return 0, fmt.Errorf("estimate: no ZeRO stage %d (want 0, 1, 2 or 3)", stage)
}

// Line is one buffer of an estimate: what it is, its accounting category
// and tier (as package mem names them) and its size on one rank.
type Line struct {
	What     string
	Category mem.Category
	Tier     mem.Tier
	Elements int64 // elements (float32 each on dszero's CPU backend); 0 when given in bytes only
	Bytes    int64
}

// Tiers sums bytes by tier.
type Tiers struct {
	Device     int64 `json:"device"`
	PinnedHost int64 `json:"pinned_host"`
	NVMe       int64 `json:"nvme"`
}

// Add accounts b bytes in tier t.
func (s *Tiers) Add(t mem.Tier, b int64) {
	switch t {
	case mem.Device:
		s.Device += b
	case mem.PinnedHost:
		s.PinnedHost += b
	case mem.NVMe:
		s.NVMe += b
	default:
		panic(fmt.Sprintf("estimate: unknown tier %v", t))
	}
}

// Get is the bytes in tier t.
func (s Tiers) Get(t mem.Tier) int64 {
	switch t {
	case mem.PinnedHost:
		return s.PinnedHost
	case mem.NVMe:
		return s.NVMe
	}
	return s.Device
}

// Plus is the tier-wise sum.
func (s Tiers) Plus(o Tiers) Tiers {
	return Tiers{s.Device + o.Device, s.PinnedHost + o.PinnedHost, s.NVMe + o.NVMe}
}

// sum totals lines by tier.
func sum(lines []Line) Tiers {
	var t Tiers
	for _, l := range lines {
		t.Add(l.Tier, l.Bytes)
	}
	return t
}

// Stage is one rank's memory at one ZeRO stage, activations aside.
type Stage struct {
	Stage       int
	States      []Line // model states
	Buffers     []Line // the stage's buffers
	StatesTotal Tiers  // of States
	Total       Tiers  // of States and Buffers
}

// states is how the model states of one rank are laid out: the inputs of
// ModelStates.
type states struct {
	params  []partition.Param // in flattening order
	world   int               // N, data-parallel ranks
	bytes   int64             // bytes per stored element: 4 on dszero's CPU backend
	half    bool              // fp16/bf16 training: a working copy apart from the master at stage 0
	nStates int               // fp32 optimizer state tensors per element
	optDev  dsconfig.OffloadDevice
	parDev  dsconfig.OffloadDevice
	persist []bool // stage 3: parameters that stay gathered (their partitions stay on the device)
	// Stage 3's partial optimizer offload (offload_optimizer.ratio < 1
	// with device cpu): its sub-groups of subGroupSize, the ratio and the
	// release's rule.
	subGroupSize int
	ratio        float64
	order        partition.OffloadOrder
}

// keptOnDevice is, at stage 3 with partial optimizer offload, how many of
// the rank's elements of master, gradient and optimizer state stay on the
// device: those of the sub-groups the ratio does not offload.
func (s states) keptOnDevice() int64 {
	if s.optDev != dsconfig.OffloadCPU || s.ratio >= 1 {
		return 0
	}
	lay := partition.Stage3(s.params, s.world, s.subGroupSize)
	lo, hi := s.order.HostSubGroups(len(lay.SubGroups), s.ratio)
	var n int64
	for g := range lay.SubGroups {
		if g < lo || g >= hi {
			n += int64(lay.SubGroupNumel(g))
		}
	}
	return n
}

func offloadTier(d dsconfig.OffloadDevice) mem.Tier {
	switch d {
	case dsconfig.OffloadCPU:
		return mem.PinnedHost
	case dsconfig.OffloadNVMe:
		return mem.NVMe
	}
	return mem.Device
}

// modelStates is one rank's model states at stage, in dszero's layouts
// (see the package doc for the table). Every term is counted on the
// padded layout the stage allocates, so it is what the accountant
// measures, not the paper's Ψ/N.
func (s states) modelStates(stage int) Stage {
	var total int64
	for _, p := range s.params {
		total += int64(p.Numel)
	}
	line := func(what string, c mem.Category, t mem.Tier, n int64) Line {
		return Line{What: what, Category: c, Tier: t, Elements: n, Bytes: n * s.bytes}
	}
	var out []Line
	// Where the optimizer's state and master go: DeepSpeed offloads them at
	// stages 1 and 2 only to the CPU (engine.zero_cpu_offload is device ==
	// cpu; nvme leaves them on the device), at stage 3 to cpu or nvme.
	opt := offloadTier(s.optDev)
	if stage < 3 && s.optDev == dsconfig.OffloadNVMe {
		opt = mem.Device
	}
	// The fp32 gradient partition follows the optimizer to the host; with
	// NVMe it is swapped from host memory.
	gradTier := opt
	if gradTier == mem.NVMe {
		gradTier = mem.PinnedHost
	}
	switch stage {
	case 0:
		out = append(out, line("fp32 master parameters (the working ones in fp32)", mem.MasterParams, mem.Device, total))
		if s.half {
			out = append(out, line("16-bit working parameters", mem.Params16, mem.Device, total))
		}
		out = append(out, line("fp32 gradients", mem.Grads, mem.Device, total))
		out = append(out, line(fmt.Sprintf("optimizer state (%d fp32 tensors)", s.nStates), mem.OptimState, mem.Device, int64(s.nStates)*total))
	case 1, 2:
		fl := partition.Flat(s.params, s.world)
		padded, part := int64(fl.Padded), int64(fl.PartitionSize)
		out = append(out, line("working parameters, full (padded flat buffer)", mem.Params16, mem.Device, padded))
		if stage == 1 {
			out = append(out, line("fp32 gradients, full (padded)", mem.Grads, mem.Device, padded))
		} else {
			out = append(out, line("fp32 gradient partition", mem.Grads, gradTier, part))
		}
		out = append(out, line("fp32 master partition", mem.MasterParams, opt, part))
		out = append(out, line(fmt.Sprintf("optimizer state partition (%d fp32 tensors)", s.nStates), mem.OptimState, opt, int64(s.nStates)*part))
	case 3:
		var onDev, off int64 // partitions of persistent parameters, of the others
		for i, p := range s.params {
			ps := int64(partition.ParamPartitionSize(p.Numel, s.world))
			if s.persist != nil && s.persist[i] {
				onDev += ps
			} else {
				off += ps
			}
		}
		rank := onDev + off
		if !s.half && s.optDev == dsconfig.OffloadNone && s.parDev == dsconfig.OffloadNone {
			// fp32 without offload: the working partitions are the master.
			out = append(out, line("fp32 gradient partitions", mem.Grads, mem.Device, rank))
			out = append(out, line("fp32 master partitions (the working ones in fp32)", mem.MasterParams, mem.Device, rank))
			out = append(out, line(fmt.Sprintf("optimizer state partitions (%d fp32 tensors)", s.nStates), mem.OptimState, mem.Device, int64(s.nStates)*rank))
			break
		}
		par := offloadTier(s.parDev)
		if par == mem.Device {
			onDev, off = rank, 0
		}
		if onDev > 0 {
			out = append(out, line("working parameter partitions", mem.Params16, mem.Device, onDev))
		}
		if off > 0 {
			out = append(out, line("working parameter partitions (offloaded)", mem.Params16, par, off))
		}
		// Partial offload keeps some sub-groups' master, gradients and
		// state on the device (their own lines).
		kept := s.keptOnDevice()
		if off := rank - kept; off > 0 || kept == 0 {
			out = append(out, line("fp32 gradient partitions", mem.Grads, gradTier, off))
			out = append(out, line("fp32 master partitions", mem.MasterParams, opt, off))
			out = append(out, line(fmt.Sprintf("optimizer state partitions (%d fp32 tensors)", s.nStates), mem.OptimState, opt, int64(s.nStates)*off))
		}
		if kept > 0 {
			const dev = " (sub-groups kept on the device: offload_optimizer.ratio)"
			out = append(out, line("fp32 gradient partitions"+dev, mem.Grads, mem.Device, kept))
			out = append(out, line("fp32 master partitions"+dev, mem.MasterParams, mem.Device, kept))
			out = append(out, line(fmt.Sprintf("optimizer state partitions (%d fp32 tensors)", s.nStates)+dev, mem.OptimState, mem.Device, int64(s.nStates)*kept))
		}
	default:
		panic(fmt.Sprintf("estimate: no ZeRO stage %d", stage))
	}
	return Stage{Stage: stage, States: out, StatesTotal: sum(out)}
}

// OptimizerStates is the number of fp32 tensors per parameter element the
// plan's optimizer keeps (what mem.OptimState holds ÷ 4 bytes ÷ elements),
// and its name. Without an optimizer block, AdamW is assumed.
func OptimizerStates(o dsconfig.Optimizer) (n int, name string, assumed bool) {
	switch o.Impl {
	case "":
		return 2, "AdamW", true
	case "torch.optim.SGD":
		if o.Momentum != 0 {
			return 1, o.Impl, false // momentum_buffer
		}
		return 0, o.Impl, false
	case "torch.optim.Adagrad", "DeepSpeedCPUAdagrad": // sum
		return 1, o.Impl, false
	case "FusedLion", "DeepSpeedCPULion": // exp_avg
		return 1, o.Impl, false
	}
	if o.AMSGrad {
		return 3, o.Impl, false // exp_avg, exp_avg_sq, max_exp_avg_sq
	}
	return 2, o.Impl, false // Adam family and Lamb: exp_avg, exp_avg_sq
}

// Persistent is DeepSpeed's mark_persistent_parameters
// (parameter_offload.py) over params in named_parameters order: a
// parameter of at most paramThreshold elements stays gathered on every
// rank while the running total stays within modelThreshold; one that
// would exceed it is skipped and the scan goes on.
func Persistent(params []partition.Param, paramThreshold, modelThreshold int64) (persist []bool, count int, numel int64) {
	persist = make([]bool, len(params))
	for i, p := range params {
		n := int64(p.Numel)
		if n+numel > modelThreshold {
			continue
		}
		if n <= paramThreshold {
			persist[i] = true
			count++
			numel += n
		}
	}
	return persist, count, numel
}
