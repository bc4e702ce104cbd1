// Package offload holds a ZeRO stage-3 rank's partitions where the plan
// puts them between uses: the stores that stage 3 reads and writes
// through, one implementation per offload tier, so that stage 3 itself
// never asks where a partition lives.
//
// # Vocabulary
//
// A rank keeps two kinds of state between steps (partition.Stage3Layout
// lays both out: every parameter's partition in order, padding
// included, cut into sub-groups of about sub_group_size elements):
//
//   - the working partitions, in the training precision: what each
//     unit's all-gather sends (the "fp16 partitions", mem.Params16). A
//     parameter store holds them:
//     MemoryParams in memory (the persistent parameters' partitions on
//     the device, the rest in offload_param's tier: the device or, with
//     offload_param cpu, the pinned host);
//     AliasedParams when fp32 training without any offload lets the
//     fp32 master be the working partitions (one buffer, accounted once
//     as mem.MasterParams: DeepSpeed keeps two, 4Ψ/N bytes more);
//     SwappedParams in swap files (offload_param nvme, ZeRO-Infinity),
//     each non-persistent partition read when its unit is gathered or
//     ahead of that along the trace, and written back after each step.
//   - the optimizer side: per sub-group, its fp32 master partition and
//     the optimizer state over it. An optimizer-state store holds them
//     and takes each sub-group's step:
//     MemoryOptim in memory (the device, the pinned host with
//     offload_optimizer cpu, or split between them by partial offload's
//     Placement);
//     SwappedOptim in swap files (offload_optimizer nvme), each
//     sub-group read in, stepped and written back in turn, the next one
//     read while one steps.
//
// The gradient partitions live with the optimizer side, in memory
// (Placement.Alloc), in every configuration.
//
// # Building them
//
// Stage 3 chooses the two stores once, from its configuration
// (stage3/offload.go), and calls them through two small interfaces
// defined there; the step loop reads
//
//	master, err := optimizer.Step(g, grad, setHyperparams) // swap in, step, swap out
//	err = params.Update(g, master)                        // round into the working partitions (and write them out)
//
// whatever the tiers. Adding an offload tier is one store here and one
// line in that builder.
//
// # Loading a checkpoint
//
// A checkpoint's load reads into what View returns where that is the
// state itself (the stores in memory), and Import takes it. SwappedOptim
// has no such buffers: it takes the load tensor by tensor instead
// (optimload.go: BeginLoad, LoadTensor, EndLoad, ImportLoaded), each
// read through a buffer of its swapper's pool straight to the tensor's
// swap file, each master also handed to the parameter store's Load
// (SwappedParams writes it out a piece at a time), so that a load
// allocates nothing of the model's size.
//
// # Memory
//
// Every store accounts what it allocates with the mem.Accountant it is
// given, in the categories and tiers the memory estimate uses, and
// hands it all back in Close. The swap files and buffers are accounted
// by the nvme.Swapper the store is given a constructor for.
package offload
