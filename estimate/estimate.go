package estimate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero/partition"
)

// Input is what an estimate is for. Give either Layout (a real model:
// DeepSpeed's _all_live estimators) or Params and, for ZeRO-3's
// estimator, LargestLayer (a hypothetical one: _all_cold).
type Input struct {
	Model        string        // the model's name, for the report
	Layout       *model.Layout // the model's parameters; nil for Params only
	Params       int64         // Ψ when Layout is nil
	LargestLayer int64         // ZeRO-3's largest_layer_params when Layout is nil; 0 if unknown
	Hardware     Hardware

	// Plan, if set, adds dszero's estimate for this config, compiled for
	// Hardware.GPUs() ranks. Offload devices may be overridden in it.
	Plan *dsconfig.Plan
	// GPT, if set, adds the activations of a micro-batch of the plan's
	// train_micro_batch_size_per_gpu sequences of SeqLen tokens.
	GPT    *gpt.Config
	SeqLen int
	// Checkpoint and CPUCheckpoint are the run's activation checkpointing
	// (what the total counts; both variants are reported).
	Checkpoint, CPUCheckpoint bool
	// OffloadOrder is the DeepSpeed release's rule for which sub-groups
	// offload_optimizer.ratio < 1 offloads; the zero value is 0.19.5's
	// (dszero's default release).
	OffloadOrder partition.OffloadOrder
	// KeepAfterForward is stage 3 with FSDP's reshard_after_forward false
	// (SHARD_GRAD_OP, the engine's KeepAfterForward): each unit stays
	// gathered from its forward to its backward. No ds_config key sets it.
	KeepAfterForward bool
}

// Report is an estimate: DeepSpeed's estimators and dszero's own.
type Report struct {
	Model            string
	Params           int64  // Ψ
	LargestLayer     int64  // largest_layer_params; 0 if unknown
	LargestLayerName string // the module, with a model
	Live             bool   // counted from a model (_all_live), else given (_all_cold)
	Hardware         Hardware
	Zero2            []Zero2Row
	Zero3            []Zero3Row // nil without a largest layer
	Dszero           *Estimate  // nil without a plan
}

// Estimate is dszero's estimate for one config, per rank.
type Estimate struct {
	Config           string
	Ranks            int // N, the data-parallel size
	Stage            int // the config's ZeRO stage
	Precision        string
	Optimizer        string
	OptimizerStates  int  // fp32 state tensors per parameter
	OptimizerAssumed bool // the config has no optimizer block; AdamW assumed
	OffloadOptimizer dsconfig.OffloadDevice
	OffloadParam     dsconfig.OffloadDevice
	MicroBatch       int
	SeqLen           int
	Padded           int64 // stages 1–2: the flat buffer padded to a multiple of 2N
	Partition        int64 // stages 1–2: elements per rank's partition
	Stage3Numel      int64 // stage 3: Σ ceil(numel/N) over the parameters

	Stages      [4]Stage // stages 0–3, offload as configured
	Activations []Line   // without checkpointing; nil without a model
	Checkpoint  []Line   // with activation checkpointing
	Checkpoints bool     // the run checkpoints activations (what Total counts)
	Total       Tiers    // the config's stage: its Total + activations
	// BF16MasterStates is, with bf16_master_weights_and_grads (or
	// fp16_master_weights_and_grads), the config's stage's model states at
	// DeepSpeed's 16-bit widths for the master, its gradient and
	// (bf16_optimizer_states) the optimizer state.
	BF16MasterStates Tiers
	Notes            []string
}

// Compute makes the report. Invalid input is an error naming the field.
func Compute(in Input) (Report, error) {
	if err := in.Hardware.check(); err != nil {
		return Report{}, err
	}
	r := Report{Model: in.Model, Hardware: in.Hardware}
	var params []partition.Param
	switch {
	case in.Layout != nil:
		r.Live = true
		r.Params, r.LargestLayer, r.LargestLayerName = ModelToParams(in.Layout)
		for _, s := range in.Layout.Specs {
			params = append(params, partition.Param{Name: s.Name, Numel: s.Numel})
		}
	case in.Params <= 0:
		return Report{}, fmt.Errorf("estimate: %d parameters, must be > 0", in.Params)
	case in.LargestLayer < 0 || in.LargestLayer > in.Params:
		return Report{}, fmt.Errorf("estimate: largest layer of %d parameters, must be in [0, %d] (the total)", in.LargestLayer, in.Params)
	default:
		r.Params, r.LargestLayer = in.Params, in.LargestLayer
		params = []partition.Param{{Name: "params", Numel: int(in.Params)}}
	}
	r.Zero2 = Zero2Rows(r.Params, in.Hardware)
	if r.LargestLayer > 0 {
		r.Zero3 = Zero3Rows(r.Params, r.LargestLayer, in.Hardware)
	}
	if in.Plan == nil {
		return r, nil
	}
	e, err := dszero(in, params, r.Params)
	if err != nil {
		return Report{}, err
	}
	r.Dszero = e
	return r, nil
}

// dszero is dszero's estimate for in.Plan.
func dszero(in Input, params []partition.Param, total int64) (*Estimate, error) {
	p := *in.Plan
	if p.WorldSize != in.Hardware.GPUs() {
		return nil, fmt.Errorf("estimate: the plan is compiled for %d ranks, the hardware has %d GPUs", p.WorldSize, in.Hardware.GPUs())
	}
	// ZeRO partitions over every rank, sequence-parallel or not: DeepSpeed's
	// sequence-data-parallel group (package train, seqpar.go).
	n := p.WorldSize
	if n < 1 {
		return nil, fmt.Errorf("estimate: the plan has %d data-parallel ranks", n)
	}
	z := p.Zero
	if z.Stage < 0 || z.Stage >= len(Estimate{}.Stages) {
		return nil, fmt.Errorf("estimate: plan %s: zero_optimization.stage %d: want 0, 1, 2 or 3", p.File, z.Stage)
	}
	nStates, optName, assumed := OptimizerStates(p.Optimizer)
	e := &Estimate{Config: p.File, Ranks: n, Stage: z.Stage, Precision: p.Precision.DType.String(),
		Optimizer: optName, OptimizerStates: nStates, OptimizerAssumed: assumed,
		OffloadOptimizer: z.OffloadOptimizer.Device, OffloadParam: z.OffloadParam.Device,
		MicroBatch: int(p.Batch.TrainMicroBatchSizePerGPU), SeqLen: in.SeqLen, Checkpoints: in.Checkpoint}
	persist := make([]bool, len(params)) // with Params alone, the tensors are unknown
	if in.Layout != nil {
		persist, _, _ = Persistent(params, z.ParamPersistenceThreshold, z.ModelPersistenceThreshold)
	}
	st := states{params: params, world: n, bytes: 4, half: p.Precision.DType != device.F32, nStates: nStates,
		optDev: z.OffloadOptimizer.Device, parDev: z.OffloadParam.Device, persist: persist,
		subGroupSize: int(z.SubGroupSize), ratio: z.OffloadOptimizer.Ratio, order: in.OffloadOrder}
	bi := bufferInputs{layout: in.Layout, params: params, total: total, world: n, zero: z, persist: persist, bytes: 4,
		keepAfterForward: in.KeepAfterForward}
	for s := range e.Stages {
		row := st.modelStates(s)
		row.Buffers = append(bi.buffers(s), bi.swapBuffers(s)...)
		row.Total = row.StatesTotal.Plus(sum(row.Buffers))
		e.Stages[s] = row
	}
	fl := partition.Flat(params, n)
	e.Padded, e.Partition = int64(fl.Padded), int64(fl.PartitionSize)
	for _, q := range params {
		e.Stage3Numel += int64(partition.ParamPartitionSize(q.Numel, n))
	}
	e.Total = e.Stages[z.Stage].Total
	if in.GPT != nil {
		if in.SeqLen < 1 || in.SeqLen > in.GPT.Context {
			return nil, fmt.Errorf("estimate: sequence length %d, must be in [1, %d] (the model's context)", in.SeqLen, in.GPT.Context)
		}
		if in.CPUCheckpoint && !in.Checkpoint {
			return nil, errors.New("estimate: CPU checkpointing needs activation checkpointing")
		}
		sp := max(1, int(p.SequenceParallelSize))
		if err := in.GPT.CheckSeqParallel(sp, in.SeqLen); sp > 1 && err != nil {
			return nil, fmt.Errorf("estimate: %w", err)
		}
		e.Activations = ActivationsSP(*in.GPT, e.MicroBatch, in.SeqLen, sp, false, false)
		e.Checkpoint = ActivationsSP(*in.GPT, e.MicroBatch, in.SeqLen, sp, true, in.CPUCheckpoint)
		if sp > 1 {
			e.Notes = append(e.Notes, seqParallelNote(*in.GPT, e.MicroBatch, in.SeqLen, sp, in.Checkpoint, in.CPUCheckpoint))
		}
		acts := e.Activations
		if in.Checkpoint {
			acts = e.Checkpoint
		}
		e.Total = e.Total.Plus(sum(acts))
	}
	if z.OffloadOptimizer.Device == dsconfig.OffloadNVMe {
		e.Notes = append(e.Notes, "offload_optimizer nvme: DeepSpeed offloads the optimizer to NVMe at stage 3 only; at stages 1 and 2 it stays on the device (engine.zero_cpu_offload is device == cpu)")
	}
	if z.OffloadParam.Device != dsconfig.OffloadNone && z.Stage < 3 {
		e.Notes = append(e.Notes, fmt.Sprintf("offload_param %s applies at stage 3 only (the stage 3 row)", z.OffloadParam.Device))
	}
	if z.OffloadOptimizer.Device != dsconfig.OffloadNone && z.Stage == 0 {
		e.Notes = append(e.Notes, fmt.Sprintf("offload_optimizer %s applies at stages 1–3 (their rows), not at stage 0", z.OffloadOptimizer.Device))
	}
	if in.Layout == nil {
		e.Notes = append(e.Notes, "with --params alone the parameter list is unknown: stage 3 padding, persistent parameters and the gathered units are not counted; give --model for them and for activations")
	}
	if assumed {
		e.Notes = append(e.Notes, "the config has no optimizer block: AdamW (2 fp32 states) assumed")
	}
	if pr := p.Precision; (pr.BF16MasterWeightsAndGrads || pr.FP16MasterWeightsAndGrads) && z.Stage > 0 {
		var note string
		fp16 := pr.FP16MasterWeightsAndGrads
		e.BF16MasterStates, note = bf16MasterNote(e.Stages[z.Stage], pr.BF16OptimizerStates && !fp16, fp16)
		e.Notes = append(e.Notes, note)
	}
	return e, nil
}

// Rows for JSON: Line and Stage with names for category and tier.

type lineJSON struct {
	What     string `json:"what"`
	Category string `json:"category"`
	Tier     string `json:"tier"`
	Elements int64  `json:"elements"`
	Bytes    int64  `json:"bytes"`
}

// MarshalJSON writes the category and tier by name.
func (l Line) MarshalJSON() ([]byte, error) {
	return json.Marshal(lineJSON{l.What, l.Category.String(), l.Tier.String(), l.Elements, l.Bytes})
}

// MarshalJSON writes the stage's lines and totals.
func (s Stage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Stage       int    `json:"stage"`
		States      []Line `json:"states"`
		Buffers     []Line `json:"buffers"`
		StatesTotal Tiers  `json:"states_total"`
		Total       Tiers  `json:"total"`
	}{s.Stage, nonNil(s.States), nonNil(s.Buffers), s.StatesTotal, s.Total})
}

// MarshalJSON writes the report with the field names of the package doc.
func (r Report) MarshalJSON() ([]byte, error) {
	type ds struct {
		Zero2 []Zero2Row `json:"zero2"`
		Zero3 []Zero3Row `json:"zero3"`
	}
	return json.Marshal(struct {
		Model            string    `json:"model"`
		Params           int64     `json:"params"`
		LargestLayer     int64     `json:"largest_layer_params"`
		LargestLayerName string    `json:"largest_layer"`
		Live             bool      `json:"live"`
		GPUsPerNode      int       `json:"num_gpus_per_node"`
		Nodes            int       `json:"num_nodes"`
		BufferFactor     float64   `json:"additional_buffer_factor"`
		DeepSpeed        ds        `json:"deepspeed"`
		Dszero           *Estimate `json:"dszero"`
	}{r.Model, r.Params, r.LargestLayer, r.LargestLayerName, r.Live, r.Hardware.GPUsPerNode, r.Hardware.Nodes,
		r.Hardware.BufferFactor, ds{nonNil(r.Zero2), nonNil(r.Zero3)}, r.Dszero})
}

// MarshalJSON writes the estimate with the field names of the package doc.
func (e Estimate) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Config                  string   `json:"config"`
		Ranks                   int      `json:"ranks"`
		Stage                   int      `json:"zero_stage"`
		Precision               string   `json:"precision"`
		Optimizer               string   `json:"optimizer"`
		OptimizerStates         int      `json:"optimizer_states"`
		OptimizerAssumed        bool     `json:"optimizer_assumed"`
		OffloadOptimizer        string   `json:"offload_optimizer"`
		OffloadParam            string   `json:"offload_param"`
		MicroBatch              int      `json:"micro_batch"`
		SeqLen                  int      `json:"seq_len"`
		Padded                  int64    `json:"flat_padded"`
		Partition               int64    `json:"flat_partition"`
		Stage3Numel             int64    `json:"stage3_partition"`
		Stages                  [4]Stage `json:"stages"`
		Activations             []Line   `json:"activations"`
		ActivationsCheckpointed []Line   `json:"activations_checkpointed"`
		Checkpointing           bool     `json:"activation_checkpointing"`
		Total                   Tiers    `json:"total"`
		Notes                   []string `json:"notes"`
		BF16Master              *Tiers   `json:"bf16_master_model_states,omitempty"`
	}{e.Config, e.Ranks, e.Stage, e.Precision, e.Optimizer, e.OptimizerStates, e.OptimizerAssumed,
		string(e.OffloadOptimizer), string(e.OffloadParam), e.MicroBatch, e.SeqLen, e.Padded, e.Partition, e.Stage3Numel,
		e.Stages, nonNil(e.Activations), nonNil(e.Checkpoint), e.Checkpoints, e.Total, nonNil(e.Notes), bf16Master(e)})
}

// bf16Master is the JSON's bf16_master_model_states: set only with
// bf16_master_weights_and_grads.
func bf16Master(e Estimate) *Tiers {
	if e.BF16MasterStates == (Tiers{}) {
		return nil
	}
	t := e.BF16MasterStates
	return &t
}

// nonNil makes JSON write [] instead of null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// num writes n with thousands separators: 500,000,000.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// bytesOrDash is mem.FormatBytes, or "-" for nothing.
func bytesOrDash(n int64) string {
	if n == 0 {
		return "-"
	}
	return mem.FormatBytes(n)
}
