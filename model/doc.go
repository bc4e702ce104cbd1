// Package model holds what every dszero model shares: the flat parameter
// layout, the unit hooks a ZeRO stage plugs into, the matrix-multiply
// interface, counter-based initialisation, 16-bit rounding and safetensors
// I/O. The models themselves live in model/gpt and model/mlp.
//
// Vocabulary:
//
//   - Flat buffer: all of a model's parameters in ONE []float32, tensor
//     after tensor in PyTorch named_parameters order, without gaps. This is
//     the order DeepSpeed flattens and partitions in, so a ZeRO partition
//     is plain offset arithmetic on it. Gradients live in a second flat
//     buffer with the same layout; optimizer state can copy it too.
//   - View: a named tensor cut out of a flat buffer (Layout.View); it
//     aliases the buffer, nothing is copied. A ParamSpec gives its name,
//     PyTorch shape, offset and element count.
//   - Unit: a contiguous run of tensors that is gathered, released and
//     recomputed together: for GPT the embeddings, each transformer block,
//     and the head; for the MLP each layer. ZeRO stage 3 gathers a unit's
//     parameters before it runs (UnitHooks.BeforeForward/BeforeBackward)
//     and reduces its gradients after its backward (AfterBackward). A unit
//     may Borrow another unit's tensors (a tied LM head reads wte).
//   - Activation checkpointing: keeping only each block's input in forward
//     and recomputing the block's forward in backward, trading compute for
//     activation memory (see model/gpt).
//   - Layout: the list of ParamSpecs and Units; built once per model
//     configuration with a LayoutBuilder and read-only afterwards.
//
// Initialisation is counter-based: element i of the flat buffer depends
// only on (seed, i) (Layout.InitRange), so a rank can initialise just its
// partition and get the same values as a full initialisation.
//
// 16-bit compute is emulated on float32 buffers: each op computes in
// float32 and its output is rounded to bf16 or fp16 (half.RoundBF16,
// half.RoundF16), the way PyTorch CPU kernels compute 16-bit tensors.
package model
