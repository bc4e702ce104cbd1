package data

import (
	"fmt"
	"math/bits"

	"github.com/dszero/dszero/internal/splitmix"
	"github.com/dszero/dszero/model"
)

// SFTLoader hands out one rank's micro-batches of an SFTData in DeepSpeed's
// global-batch layout (see Layout): micro-batch mb = micro × World + rank
// of step s takes the B rows at positions (s·GAS·World + mb)·B … +B−1 of
// the row order. The order runs through every row once per epoch and wraps
// into the next epoch's order, so a global batch that straddles an epoch's
// end takes its last rows and the next epoch's first ones (every step has
// the same shape; the HF Trainer would instead run a short last step).
//
// Shuffled, the order of epoch e is a permutation of the rows drawn with
// splitmix64 from (Seed, e): deterministic and the same on every rank, new
// each epoch as with the Trainer's RandomSampler, but not torch's
// generator's order. Unshuffled, it is the rows' order (record order, or
// bin order when packed).
//
// A loader is not safe for concurrent use; give each rank its own.
type SFTLoader struct {
	d       *SFTData
	l       Layout
	shuffle bool
	seed    uint64

	perms     [2]epochPerm // the two most recent epochs' orders
	denomStep int
	denom     int64
}

type epochPerm struct {
	epoch int64
	rows  []int32 // nil: not computed
}

// NewSFTLoader checks the layout against the data: T must be the data's
// Seq.
func NewSFTLoader(d *SFTData, l Layout, shuffle bool, seed uint64) (*SFTLoader, error) {
	if l.B < 1 || l.T < 1 || l.GAS < 1 || l.World < 1 {
		return nil, fmt.Errorf("data: invalid batch layout %+v", l)
	}
	if l.T != d.Seq {
		return nil, fmt.Errorf("data: the batch layout has sequences of %d tokens but the data was cut into rows of %d; load it with Seq %d",
			l.T, d.Seq, l.T)
	}
	return &SFTLoader{d: d, l: l, shuffle: shuffle, seed: seed, denomStep: -1}, nil
}

// NewBatch allocates a batch for Micro: B×T tokens and targets, and
// positions when the data is packed (unpacked rows hold one sample from
// position 0, which nil Positions already means).
func (ld *SFTLoader) NewBatch() model.Batch {
	n := ld.l.B * ld.l.T
	b := model.Batch{B: ld.l.B, Tokens: make([]int32, n), Targets: make([]int32, n)}
	if ld.d.Packing {
		b.Positions = make([]int32, n)
	}
	return b
}

// Micro fills b (from NewBatch) with rank's micro-batch `micro` of
// optimizer step `step` (both 0-based) and sets b.LossDenom to
// LossDenom(step).
func (ld *SFTLoader) Micro(step, micro, rank int, b *model.Batch) {
	l := ld.l
	n := l.B * l.T
	if len(b.Tokens) < n || len(b.Targets) < n || (ld.d.Packing && len(b.Positions) < n) {
		panic("data: short batch buffers; allocate them with NewBatch")
	}
	if step < 0 || micro < 0 || micro >= l.GAS || rank < 0 || rank >= l.World {
		panic(fmt.Sprintf("data: micro-batch (step %d, micro %d, rank %d) outside the layout %+v", step, micro, rank, l))
	}
	b.B = l.B
	base := ld.first(step, micro*l.World+rank)
	for i := 0; i < l.B; i++ {
		row := ld.row(base + int64(i))
		var pos []int32
		if b.Positions != nil {
			pos = b.Positions[i*l.T : (i+1)*l.T]
		}
		ld.d.FillRow(row, b.Tokens[i*l.T:(i+1)*l.T], b.Targets[i*l.T:(i+1)*l.T], pos)
	}
	b.LossDenom = float64(ld.LossDenom(step))
}

// LossDenom is the number of targets that take a loss in the whole global
// batch of step: all GAS micro-batches of all World ranks. It is the HF
// Trainer's num_items_in_batch with average_tokens_across_devices=True
// (the count gathered and summed over ranks): each micro-batch's loss is
// its summed token losses over this count, so the gradients summed over
// the GAS micro-steps and the World ranks are those of the mean over every
// token of the step. A loop whose gradient reduction averages over ranks
// scales each micro-batch's backward by World (the Trainer multiplies the
// loss by num_processes) and not by 1/GAS.
//
// The count is of targets, the labels after the shift: a row's first label
// is never predicted. transformers counts labels before the shift
// (labels.ne(-100)), which is the same whenever each row's first label is
// ignored (a masked prompt, or trl's padding-free packing, which ignores
// the first label of every sample) and one more per row for unpacked plain
// text.
func (ld *SFTLoader) LossDenom(step int) int64 {
	if step == ld.denomStep {
		return ld.denom
	}
	l := ld.l
	var n int64
	base := ld.first(step, 0)
	for g := int64(0); g < int64(l.GAS*l.World*l.B); g++ {
		n += int64(ld.d.rowTargets[ld.row(base+g)])
	}
	ld.denomStep, ld.denom = step, n
	return n
}

// RankDenom is the number of targets in rank's GAS micro-batches of step:
// num_items_in_batch with average_tokens_across_devices=False.
func (ld *SFTLoader) RankDenom(step, rank int) int64 {
	var n int64
	for micro := 0; micro < ld.l.GAS; micro++ {
		n += ld.MicroTargets(step, micro, rank)
	}
	return n
}

// MicroTargets is the number of targets in one micro-batch.
func (ld *SFTLoader) MicroTargets(step, micro, rank int) int64 {
	var n int64
	base := ld.first(step, micro*ld.l.World+rank)
	for i := int64(0); i < int64(ld.l.B); i++ {
		n += int64(ld.d.rowTargets[ld.row(base+i)])
	}
	return n
}

// Position is the number of rows consumed after `steps` optimizer steps
// (for checkpoints: the data position to resume from).
func (ld *SFTLoader) Position(steps int) int64 {
	return int64(steps) * int64(ld.l.GAS) * int64(ld.l.World) * int64(ld.l.B)
}

// Epoch is how many epochs `steps` optimizer steps have covered (the
// Trainer's state.epoch).
func (ld *SFTLoader) Epoch(steps int) float64 {
	return float64(ld.Position(steps)) / float64(ld.d.Rows())
}

// StepsPerEpoch is the number of optimizer steps that cover every row once,
// the last one partly (the Trainer's num_update_steps_per_epoch).
func (ld *SFTLoader) StepsPerEpoch() int {
	per := ld.l.GAS * ld.l.World * ld.l.B
	return (ld.d.Rows() + per - 1) / per
}

// first is the order position of micro-batch mb's first row in step.
func (ld *SFTLoader) first(step, mb int) int64 {
	l := ld.l
	return (int64(step)*int64(l.GAS)*int64(l.World) + int64(mb)) * int64(l.B)
}

// row maps an order position to a row.
func (ld *SFTLoader) row(g int64) int {
	rows := int64(ld.d.Rows())
	e, i := g/rows, g%rows
	if !ld.shuffle {
		return int(i)
	}
	return int(ld.perm(e)[i])
}

func (ld *SFTLoader) perm(e int64) []int32 {
	for k := range ld.perms {
		if ld.perms[k].rows != nil && ld.perms[k].epoch == e {
			return ld.perms[k].rows
		}
	}
	p := Permutation(ld.d.Rows(), ld.seed, e)
	ld.perms[1] = ld.perms[0]
	ld.perms[0] = epochPerm{epoch: e, rows: p}
	return p
}

// Permutation returns a uniformly random permutation of 0…n−1 for the
// given seed and epoch: a Fisher–Yates shuffle driven by the splitmix64
// stream keyed by Mix(seed·Golden + epoch), each index drawn without
// modulo bias (Lemire's multiply-and-reject).
func Permutation(n int, seed uint64, epoch int64) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	x := splitmix.Mix(seed*splitmix.Golden + uint64(epoch))
	next := func() uint64 {
		x += splitmix.Golden
		return splitmix.Mix(x)
	}
	for i := n - 1; i > 0; i-- {
		bound := uint64(i + 1)
		hi, lo := bits.Mul64(next(), bound)
		if lo < bound {
			for thresh := -bound % bound; lo < thresh; {
				hi, lo = bits.Mul64(next(), bound)
			}
		}
		p[i], p[hi] = p[hi], p[i]
	}
	return p
}
