package dsconfig

import "github.com/dszero/dszero/dsconfig/lenient"

// readSeqParallel reads sequence_parallel_size (DeepSpeed-Ulysses: groups
// of that many consecutive ranks share each sample's tokens; the batch
// triplet divides the world by it, batch.go) and, with it above 1, the
// gradient reduction's dtype as DeepSpeed 0.14.5's engine sets it: with
// sequence parallelism the engine replaces communication_data_type by
// seq_parallel_comm_data_type, default fp32 (engine.py, "if
// self.sequence_parallel_size > 1"). That is the key its constant
// SEQ_PARALLEL_COMMUNICATION_DATA_TYPE names (runtime/constants.py); the
// documented seq_parallel_communication_data_type is not read at all.
func (c *compiler) readSeqParallel(top *block) {
	p := &c.plan
	sp := top.get("sequence_parallel_size")
	p.SequenceParallelSize = sp.Int(1, 1)
	doc := top.get("seq_parallel_communication_data_type")
	if p.SequenceParallelSize <= 1 {
		return
	}
	p.CommunicationDataType = c.commDType(top, "seq_parallel_comm_data_type", "fp32")
	if doc.v != nil && doc.v.Kind != lenient.Null {
		c.s.warnf(doc.v, doc.path, `write "seq_parallel_comm_data_type" to choose it`,
			"DeepSpeed does not read seq_parallel_communication_data_type (its constant is seq_parallel_comm_data_type): with sequence_parallel_size %d the gradients reduce in %s", p.SequenceParallelSize, p.CommunicationDataType)
	}
}

// SeqParallelZeRO3AveragesOverWorld reports whether DeepSpeed averages the
// gradients of ZeRO stage 3 under sequence parallelism over every rank (W)
// rather than over the W/sp data-parallel ones, the averaging of stages 0-2
// and of stage 3's other path. Stage 3 reduces each bucket one of two ways
// (stage3.py, __reduce_and_partition_ipg_grads): with contiguous_gradients,
// without reduce_scatter and a bucket within reduce_bucket_size, an
// all-reduce divided by W/sp (__avg_scatter_contiguous_grads, "world_sz /
// float(self.sequence_parallel_size)"); otherwise reduce_scatter_coalesced
// (runtime/comm/coalesced_collectives.py), which pre-divides by the group's
// size W and knows nothing of sequence parallelism (__avg_scatter_grads).
// The members of an SP group hold shares of one sample's gradient, so on
// that path DeepSpeed's gradients, and its gradient norm, are 1/sp of stage
// 0's. It is so in 0.14.5 and every later version read (0.16.5's master,
// and the newest stage3.py, whose only rescaling there is AutoEP's), and
// users meet it (DeepSpeed issue #6841). dszero averages as DeepSpeed does.
// A tensor larger than reduce_bucket_size always takes the second path
// (ReduceBucketSize); train refuses that mix.
func (p Plan) SeqParallelZeRO3AveragesOverWorld() bool {
	return p.SequenceParallelSize > 1 && p.Zero.Stage == 3 && (p.Zero.ReduceScatter || !p.Zero.ContiguousGradients)
}

// seqParZeRO3 warns of SeqParallelZeRO3AveragesOverWorld (crossChecks).
func (c *compiler) seqParZeRO3() {
	p := &c.plan
	if !p.SeqParallelZeRO3AveragesOverWorld() {
		return
	}
	key, why := "zero_optimization.reduce_scatter", "reduce_scatter (the default)"
	if !p.Zero.ReduceScatter {
		key, why = "zero_optimization.contiguous_gradients", "contiguous_gradients false"
	}
	c.s.warnf(c.at(key), key, `set "reduce_scatter": false and "contiguous_gradients": true in zero_optimization for stage 0-2's averaging, or scale the loss by sequence_parallel_size`,
		"with sequence_parallel_size %d, ZeRO stage 3's %s averages the gradients over all %d ranks, not over the %d data-parallel ones as stages 0-2 do (DeepSpeed's reduce_scatter_coalesced): the gradients and the gradient norm are 1/%d of stage 0's, in DeepSpeed and in dszero alike",
		p.SequenceParallelSize, why, p.WorldSize, p.DataParallelSize(), p.SequenceParallelSize)
}
