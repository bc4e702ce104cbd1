package train

import (
	"context"
	"fmt"
	"strings"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
)

// Sequence parallelism (DeepSpeed-Ulysses, the ds_config's
// sequence_parallel_size sp). The layout is DeepSpeed's
// (deepspeed/utils/groups.py, initialize_sequence_parallel):
//
//   - sequence-parallel groups are sp consecutive ranks: group g is ranks
//     g·sp … g·sp+sp−1 (_get_sequence_parallel_group); member s holds
//     tokens s·T/sp … of every sample of the group;
//   - the data-parallel shards are the W/sp groups: rank r reads the
//     micro-batches of data-parallel rank r/sp (the batch triplet divides
//     by W/sp, dsconfig.Plan.DataParallelSize), so a group's members read
//     the same samples and keep their own slice of the tokens;
//   - ZeRO partitions, reduces and gathers over all W ranks: DeepSpeed's
//     sequence-data-parallel group (_get_sequence_data_parallel_group,
//     the engine's seq_data_parallel_group, which its ZeRO optimizers
//     take as dp_process_group) as an mpu that has one defines it
//     (Megatron-DeepSpeed; ALST's groups for the HF integration): every
//     rank of the data and the sequence dimensions. (Without an mpu,
//     DeepSpeed falls back to its data-parallel group, or with a
//     (data_parallel, sequence_parallel) device mesh to the mesh's
//     data_parallel dimension; that layout is not what is implemented
//     here.) DeepSpeed's reduction divides that
//     group's gradient sum by W/sp (stage_1_and_2's
//     dp_world_size / sequence_parallel_size), not by W: the members'
//     gradients are shares of one sample's and are summed. The engine
//     here averages over W, so each rank's backward scale is multiplied
//     by sp instead.

// seqPar is one rank's place in the sequence-parallel layout.
type seqPar struct {
	size   int       // sp; 1 without sequence parallelism
	member int       // rank % sp
	dpRank int       // rank / sp: the data-parallel shard it reads
	group  comm.Comm // the sp ranks of its group; nil when size is 1
	full   model.Batch
	factor float32 // gradFactor
}

// checkSeqParallel refuses a sequence_parallel_size the model cannot run,
// before any rank starts.
func checkSeqParallel(cfg *Config) error {
	sp := int(cfg.Plan.SequenceParallelSize)
	if sp <= 1 {
		return nil
	}
	if cfg.Plan.WorldSize%sp != 0 {
		return fmt.Errorf("sequence_parallel_size %d does not divide the world size %d: use a sequence_parallel_size that divides it", sp, cfg.Plan.WorldSize)
	}
	if cu := cfg.Plan.Curriculum; cu.Enabled {
		// The curriculum truncates each rank's micro-batch; under Ulysses
		// a rank holds a slice of the sequence, not its start.
		return fmt.Errorf("%s: a sequence-length curriculum with sequence_parallel_size %d is not supported (each rank holds a slice of the sequence, not its first tokens): disable one of them", cu.Source, sp)
	}
	m, ok := cfg.Model.(model.SeqParalleler)
	if !ok {
		return fmt.Errorf("sequence_parallel_size %d: the model %T does not support Ulysses sequence parallelism (the GPT does): set sequence_parallel_size to 1", sp, cfg.Model)
	}
	if err := m.CheckSeqParallel(sp, cfg.SeqLen); err != nil {
		return err // it names sequence_parallel_size and the fix
	}
	if z := cfg.Plan.Zero; z.Stage == 3 && !cfg.Plan.SeqParallelZeRO3AveragesOverWorld() {
		// DeepSpeed's stage 3 reduces a tensor larger than the bucket
		// alone through reduce_scatter_coalesced, which divides by W,
		// and the others by W/sp: a mix not reproduced here.
		var big []string
		most := 0
		for _, t := range cfg.Model.Layout().Specs {
			if int64(t.Numel) > z.ReduceBucketSize {
				big, most = append(big, fmt.Sprintf("%s (%d)", t.Name, t.Numel)), max(most, t.Numel)
			}
		}
		if big != nil {
			return fmt.Errorf("zero_optimization.reduce_bucket_size %d: with sequence_parallel_size %d and reduce_scatter false DeepSpeed's stage 3 averages the tensors larger than a bucket (%s) over all %d ranks and the others over the %d data-parallel ones; dszero does not reproduce that mix: raise reduce_bucket_size to at least %d",
				z.ReduceBucketSize, sp, strings.Join(big, ", "), cfg.Plan.WorldSize, cfg.Plan.DataParallelSize(), most)
		}
	}
	return nil
}

// newSeqPar makes rank c.Rank()'s group: a Split of c, which every rank
// calls (also with sp 1, where it does not communicate).
func newSeqPar(ctx context.Context, c comm.Comm, p dsconfig.Plan) (*seqPar, error) {
	sp := max(1, int(p.SequenceParallelSize))
	s := &seqPar{size: sp, member: c.Rank() % sp, dpRank: c.Rank() / sp, factor: float32(sp)}
	if p.SeqParallelZeRO3AveragesOverWorld() {
		s.factor = 1
	}
	if sp == 1 {
		return s, nil
	}
	g, err := c.Split(ctx, c.Rank()/sp, c.Rank()%sp)
	if err != nil {
		return nil, fmt.Errorf("making the sequence-parallel groups of %d ranks: %w", sp, err)
	}
	s.group = g
	return s, nil
}

// batch fills b with this rank's part of micro-batch micro of step: the
// data-parallel shard's samples, cut to the member's tokens.
func (s *seqPar) batch(src Batches, step, micro int, b *model.Batch) error {
	if s.size == 1 {
		return src.Batch(step, micro, s.dpRank, b)
	}
	s.full.B = b.B
	if err := src.Batch(step, micro, s.dpRank, &s.full); err != nil {
		return err
	}
	f := &s.full
	if f.X != nil || f.Y != nil {
		return fmt.Errorf("sequence_parallel_size %d: a batch of dense vectors has no sequence to shard", s.size)
	}
	B := f.B
	if B < 1 || len(f.Tokens)%B != 0 {
		return fmt.Errorf("%d tokens do not form %d samples", len(f.Tokens), B)
	}
	T := len(f.Tokens) / B
	if T%s.size != 0 {
		return fmt.Errorf("sequence_parallel_size %d does not divide the samples' length %d: use a sequence length that is a multiple of %d", s.size, T, s.size)
	}
	b.B, b.LossDenom = B, f.LossDenom
	b.Tokens = s.cut(b.Tokens, f.Tokens, B, T)
	b.Targets = s.cut(b.Targets, f.Targets, B, T)
	b.Positions = s.cut(b.Positions, f.Positions, B, T)
	return nil
}

// cut copies the member's columns of every row of x (B, T) into dst
// (reused when it fits); nil stays nil.
func (s *seqPar) cut(dst, x []int32, B, T int) []int32 {
	if x == nil {
		return nil
	}
	if len(x) != B*T {
		return x // the model reports the mismatch
	}
	Tl := T / s.size
	dst = dst[:0]
	for b := range B {
		dst = append(dst, x[b*T+s.member*Tl:][:Tl]...)
	}
	return dst
}

// gradFactor is what a rank's backward scale is multiplied by for a loss
// that is the mean over its sequences (see the layout above).
func (s *seqPar) gradFactor() float32 { return s.factor }
