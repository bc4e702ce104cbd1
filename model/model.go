package model

import (
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/mem"
)

// Model is a network that trains on flat buffers: the contract between a
// model (model/gpt, model/mlp, model/llama) and the training loop. One
// rank's model computes on the engine's working parameters and
// accumulates into its gradient buffer, calling its UnitHooks at unit
// boundaries so a ZeRO stage can gather, release and reduce around it.
//
// One training micro-step is
//
//	loss, err := m.Forward(batch)    // keeps what Backward needs
//	err = m.Backward(scale)          // grads += d(scale·loss)/dθ
//
// and an optimizer step happens between micro-steps, outside the model.
// A Model is not safe for concurrent use.
type Model interface {
	// Layout is the flat-buffer layout of the parameters: names, shapes,
	// units. It does not change after the model is built.
	Layout() *Layout
	// Bind points the model at the working parameters and the gradient
	// buffer, Layout().Numel elements each (grads may be nil for a model
	// that only runs forward). The model keeps them until the next Bind
	// or Close.
	Bind(params, grads []float32) error
	// Forward runs the model on one micro-batch. With targets it returns
	// the loss and keeps the activations for one Backward; without, it
	// returns 0 and computes outputs only.
	Forward(b Batch) (loss float32, err error)
	// Backward accumulates into the gradient buffer the gradient of
	// dlossScale × the last Forward's loss (the engine passes
	// 1/gradient_accumulation_steps, times the loss scale under fp16), or
	// writes it there when OverwriteGrads was called since the last
	// Backward.
	Backward(dlossScale float32) error
	// OverwriteGrads makes the next Backward write each parameter's
	// gradient instead of adding it: PyTorch's AccumulateGrad after
	// zero_grad(set_to_none=True).
	OverwriteGrads()
	// Close returns the model's activations and scratch to the accountant.
	Close()
}

// IgnoreIndex is the target id whose position takes no loss: PyTorch's
// cross_entropy ignore_index default, and the label HF's data collators
// give prompt tokens, padding and packed sequence boundaries.
const IgnoreIndex = -100

// Batch is one micro-batch of B samples.
//
// Language models read Tokens, Targets and Positions, each (B, T)
// row-major; models of dense vectors (the MLP) read X and Y, each B rows.
type Batch struct {
	// B is the number of samples (rows).
	B int
	// Tokens are the input ids, B·T of them.
	Tokens []int32
	// Targets are the ids each position predicts (the inputs shifted by
	// one, as the data loader builds them), or IgnoreIndex where a
	// position takes no loss. Nil means forward only.
	Targets []int32
	// Positions are each token's position id. Packing several samples into
	// one row restarts them at 0 at each sample's first token, and
	// attention then never crosses a restart (the block-diagonal mask that
	// HF's position_ids packing gives). Nil means 0…T−1 in every row.
	Positions []int32
	// LossDenom, when positive, is what the summed token losses are
	// divided by instead of the number of targets that take a loss: the
	// count over the whole gradient-accumulation window, as HF's Trainer
	// passes num_items_in_batch, so every token weighs the same whatever
	// micro-batch it fell in.
	LossDenom float64
	// X and Y are a dense model's inputs and targets (B rows each).
	X, Y []float32
}

// Builder builds a model of one configuration for each rank that trains
// it: gpt.Config, mlp.Config and llama.Config are Builders.
type Builder interface {
	// Layout is the flat-buffer layout every rank's model has.
	Layout() Layout
	// Build makes one rank's model with what that rank computes with.
	Build(o BuildOptions) (Model, error)
	// MaxSeq is the longest sequence the model takes (its context), or 0
	// for a model of dense vectors.
	MaxSeq() int
}

// BuildOptions are what a rank gives the model it builds.
type BuildOptions struct {
	// Gemm runs the model's matrix multiplications, from the goroutine
	// that calls Forward or Backward.
	Gemm Gemmer
	// Acct accounts the model's activations and scratch.
	Acct *mem.Accountant
	// Hooks is called at every unit boundary (the rank's ZeRO strategy).
	Hooks UnitHooks
	// Checkpoint recomputes each unit's forward in backward (activation
	// checkpointing); CPUCheckpoint keeps the saved inputs in the
	// pinned-host tier.
	Checkpoint, CPUCheckpoint bool
	// DType is the training dtype the model computes in: F32 (the zero
	// value), or F16 / BF16 emulated on float32 buffers, every op's
	// output rounded to it (DType.Rounding).
	DType device.DType
	// Workers bounds the model's goroutines; 0 means GOMAXPROCS.
	Workers int
	// SeqParallel, when set, is the rank's sequence-parallel group
	// (DeepSpeed-Ulysses): only a SeqParalleler builds a model for one.
	SeqParallel comm.Comm
	// FastMath selects the model's fast kernels where it has them (gpt's
	// Options.Fast): faster, within 1e-5 of the exact losses in fp32, and
	// with a 16-bit DType float32 through the Gemmer rounded once per op
	// instead of torch's CPU bf16 kernels; not bit for bit. The zero value
	// is exact, what conformance runs.
	FastMath bool
}

// Initializer is a Builder whose random initialisation is not just its
// layout's (Layout.InitRange): a Llama zeroes its padding token's
// embedding row. Like Layout.InitRange, InitRange writes elements
// [lo, lo+len(dst)) of the flat buffer and does not depend on how the
// buffer is cut.
type Initializer interface {
	InitRange(l *Layout, seed uint64, dst []float32, lo int)
}
