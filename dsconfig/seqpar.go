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
