// Package mlp is the reference harness's TinyMLP, generalised: a stack of
// Linear layers with ReLU between them and a mean-squared-error loss,
//
//	h1  = relu(x · fc1ᵀ + b1), h2 = relu(h1 · fc2ᵀ + b2), ..., out = h · fcLᵀ + bL
//	loss = mean over all B*Out elements of (out - y)²
//
// written forward and backward by hand on a flat parameter buffer, like
// package gpt. The "tiny" preset (16 → 64 → 64 → 8) is exactly TinyMLP.
//
// The flat buffer holds fc1.weight (H1, In), fc1.bias (H1), fc2.weight,
// fc2.bias, ... in PyTorch named_parameters order; weights are in Linear
// layout (out, in). Each layer is one unit (fc1, fc2, ...), with the same
// UnitHooks as package gpt. Gradients accumulate (+=) into a gradient
// buffer of the same layout; each Backward computes a parameter's
// gradient whole and then adds it, as PyTorch's AccumulateGrad does.
// After Model.OverwriteGrads the next Backward computes each gradient
// straight into the buffer instead (PyTorch with .grad set to None), so
// the owner of the buffer need not clear it between steps.
// Activations are accounted as mem.Activations (device tier), reused by
// later steps that fit and freed by Close.
//
// With Options.Round the input x is rounded first (TinyMLP casts it to the
// parameters' dtype), then each Linear output, the loss is computed in
// float32 from the rounded output, and in backward each Linear's input
// gradient and weight and bias gradients are rounded; ReLU and its
// backward only zero elements and need no rounding.
package mlp
