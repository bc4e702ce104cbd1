package zcore

// GroupAveraging is ZeroAveraging over total ranks for a strategy whose
// communicator is one group of them (hybrid sharding: FSDP's HYBRID_SHARD,
// DeepSpeed's MiCS): every rank divides its gradients by the whole world
// before the sum within its group, and the groups' sums are then added
// across groups, so the result is the mean over all ranks. World is the
// group's size, the communicator the strategy checks against.
func GroupAveraging(total, group int) Averaging {
	a := ZeroAveraging(total)
	a.World = group
	return a
}
