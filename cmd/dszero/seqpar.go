package main

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
)

// seqParallelNote is what the run banner adds under Ulysses: the groups
// that share each sample's tokens.
func seqParallelNote(p dsconfig.Plan) string {
	if p.SequenceParallelSize <= 1 {
		return ""
	}
	return fmt.Sprintf(" (Ulysses: sequence_parallel_size %d, each of the %d groups of consecutive ranks shares its samples' tokens; ZeRO over all %d ranks)",
		p.SequenceParallelSize, p.DataParallelSize(), p.WorldSize)
}
