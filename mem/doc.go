// Package mem accounts for every byte a rank allocates.
//
// Vocabulary:
//
//   - A Category says what a buffer is for: 16-bit parameters, fp32 master
//     parameters, gradients, optimizer state, activations, communication
//     buffers or temporaries. These are the rows of DeepSpeed's memory
//     formulas (2Ψ + 2Ψ + KΨ ...), so that measured bytes can be set beside
//     them.
//   - A Tier says where a buffer lives: device memory, pinned host memory or
//     an NVMe file. Offload moves bytes between tiers; the accounting follows.
//   - An Accountant belongs to one rank. It keeps live and peak bytes per
//     (tier, category) and the peak of the tier total. A tier may have a
//     capacity; an allocation that would exceed it fails with an *OOMError,
//     the way a GPU allocation fails, naming the category, the request and
//     what is live.
//
// The Accountant is safe for concurrent use: a rank's compute and its
// communication goroutines allocate through the same one.
package mem
