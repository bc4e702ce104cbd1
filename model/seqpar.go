package model

// SeqParalleler is a Builder whose models train under DeepSpeed-Ulysses
// sequence parallelism (BuildOptions.SeqParallel): each rank of a group
// holds T/sp consecutive tokens of the same sequences and the attention
// exchanges them for heads. A Builder that is not one is refused a
// sequence_parallel_size above 1.
type SeqParalleler interface {
	Builder
	// CheckSeqParallel reports why the model cannot run with sp ranks
	// per sequence of T tokens (heads not divisible by sp, ...), naming
	// sequence_parallel_size and the fix; nil when it can.
	CheckSeqParallel(sp, T int) error
}
