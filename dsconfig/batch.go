package dsconfig

import (
	"fmt"
	"math/big"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// maxBatchCount is the largest train_batch_size, micro batch and number of
// accumulation steps dszero runs: 2^31−1.
//
// DeepSpeed has no bound (its counts are Python integers), so a larger count
// that DeepSpeed accepts is Unsupported here, never an Error: `config check`
// passes and says why, `train` refuses before it allocates anything. The
// bound keeps every product the engine forms from the triplet inside int64:
// micro × sequence length (a micro-batch's token buffers, for any sequence
// length below 2^32), train_batch_size × steps (the data loader's sample
// position and checkpoints' global_samples, for 2^32 steps). It says nothing
// about memory: whether a micro-batch fits depends on the model and the
// sequence length, which the config does not name.
const maxBatchCount = 1<<31 - 1

// batchKeys are the triplet, in DeepSpeed's order.
var batchKeys = [3]string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}

// readBatch derives DeepSpeed's batch triplet (config.py
// _set_batch_related_parameters and _batch_assertion) for the data-parallel
// world size W = world_size / sequence_parallel_size:
//
//	given TB, MB, GA   nothing
//	given TB, MB       GA = TB // MB // W
//	given TB, GA       MB = TB // W // GA
//	given MB, GA       TB = MB × GA × W
//	given TB           GA = 1, MB = TB // W
//	given MB           TB = MB × W, GA = 1
//
// then checks TB > 0, MB > 0, GA > 0 and TB == MB × GA × W. The arithmetic
// is Python's: exact integers of any size and floor division (-7 // 2 is
// -4), so every verdict and every number in a message is DeepSpeed's. A
// zero divisor, where DeepSpeed fails with ZeroDivisionError before its
// assertions, is reported as the assertion that the zero breaks. Counts
// that pass and exceed maxBatchCount are Unsupported.
func (c *compiler) readBatch(top *block) {
	var val [3]*big.Int // nil: not given
	var fields [3]*field
	bad := false
	for i, k := range batchKeys {
		f := top.get(k)
		fields[i] = f
		if f.source == FromAutoDefault {
			bad = true // "auto" already reported
			continue
		}
		if f.v == nil || f.v.Kind == lenient.Null {
			continue
		}
		if n, ok := f.v.BigInt(); ok {
			val[i] = n
			continue
		}
		bad = true
		if f.v.Kind == lenient.String {
			f.errorf("write the number without quotes", "%s is the string %s: DeepSpeed does arithmetic with it and fails with a TypeError", k, quoteStr(f.v.Str))
		} else {
			f.errorf("write a whole number", "%s must be a whole number, got %s", k, describe(f.v))
		}
	}
	if c.plan.elastic {
		return
	}
	given := [3]bool{val[0] != nil, val[1] != nil, val[2] != nil}
	if !given[0] && !given[1] && !bad {
		fix := "add train_micro_batch_size_per_gpu (and gradient_accumulation_steps); DeepSpeed derives train_batch_size from the world size"
		c.s.errorf(nil, "train_batch_size", fix, "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided")
		return
	}
	if bad {
		return
	}
	world := int64(c.opts.WorldSize)
	if sp := c.plan.SequenceParallelSize; sp > 1 {
		if world%sp != 0 {
			c.s.errorf(c.at("sequence_parallel_size"), "sequence_parallel_size", fmt.Sprintf("use a sequence_parallel_size that divides the world size %d", world),
				"the world size %d is not divisible by sequence_parallel_size %d (DeepSpeed's data-parallel size would be %g)", world, sp, float64(world)/float64(sp))
			return
		}
		world /= sp
	}
	w := big.NewInt(world)
	tb, mb, ga := val[0], val[1], val[2]
	// blame names the key a failed check points at: the one written, or
	// for a derived count the written one it came from.
	blame := func(i int) string {
		switch {
		case given[i]:
			return batchKeys[i]
		case i == 0:
			return batchKeys[1] // TB = MB × ...
		}
		return batchKeys[0] // MB or GA = TB // ...
	}
	fail := func(i int, fix, format string, args ...any) {
		c.s.errorf(c.at(blame(i)), blame(i), fix, format, args...)
	}
	switch {
	case given[0] && given[1] && given[2]:
	case given[0] && given[1]:
		if mb.Sign() == 0 {
			fail(1, "use a positive micro-batch size", "Micro batch size per gpu: 0 has to be greater than 0 (DeepSpeed divides train_batch_size by it and fails with ZeroDivisionError)")
			return
		}
		ga = floorDiv(floorDiv(tb, mb), w)
	case given[0] && given[2]:
		if ga.Sign() == 0 {
			fail(2, "use a positive number of accumulation steps", "Gradient accumulation steps: 0 has to be greater than 0 (DeepSpeed divides by it and fails with ZeroDivisionError)")
			return
		}
		mb = floorDiv(floorDiv(tb, w), ga)
	case given[1] && given[2]:
		tb = mul(mb, ga, w)
	case given[0]:
		ga, mb = big.NewInt(1), floorDiv(tb, w)
	case given[1]:
		tb, ga = mul(mb, w), big.NewInt(1)
	}
	b := &c.plan.Batch
	*b = Batch{TrainBatchSize: countOf(tb), TrainMicroBatchSizePerGPU: countOf(mb), GradientAccumulationSteps: countOf(ga)}
	for i, f := range fields {
		if f.source == FromDefault {
			f.source = FromDerived
		}
		f.v = c.at(batchKeys[i])
		f.record(settingValue([3]*big.Int{tb, mb, ga}[i]))
	}
	one := big.NewInt(1)
	switch {
	case tb.Sign() <= 0:
		fix := "use a positive global batch size"
		if !given[0] {
			fix = "use a positive micro-batch size: train_batch_size is derived as micro batch × accumulation steps × world size"
		}
		fail(0, fix, "Train batch size: %d has to be greater than 0", tb)
	case mb.Sign() <= 0:
		fix := "use a positive micro-batch size"
		if !given[1] {
			d := mul(w, maxInt(ga, one))
			fix = fmt.Sprintf("train_batch_size %d is smaller than world size %d × gradient_accumulation_steps %d: raise it to a multiple of %d, or give train_micro_batch_size_per_gpu instead", tb, world, maxInt(ga, one), d)
		}
		fail(1, fix, "Micro batch size per gpu: %d has to be greater than 0", mb)
	case ga.Sign() <= 0:
		fix := "use a positive number of accumulation steps"
		if !given[2] {
			fix = fmt.Sprintf("train_batch_size %d is smaller than micro batch %d × world size %d: set train_batch_size to %d (or a multiple), or give gradient_accumulation_steps instead", tb, mb, world, mul(mb, w))
		}
		fail(2, fix, "Gradient accumulation steps: %d has to be greater than 0", ga)
	case tb.Cmp(mul(mb, ga, w)) != 0:
		fix := fmt.Sprintf("with %d data-parallel ranks set train_batch_size to %d, or remove it and let it be derived", world, mul(mb, ga, w))
		switch {
		case !given[2]:
			fix = fmt.Sprintf("train_batch_size %d is not divisible by micro batch × world size; use a multiple of %d", tb, mul(mb, w))
		case !given[1]:
			fix = fmt.Sprintf("train_batch_size %d is not divisible by world size × gradient_accumulation_steps; use a multiple of %d", tb, mul(w, ga))
		}
		fail(0, fix, "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size: %d != %d * %d * %d", tb, mb, ga, world)
	default:
		c.boundBatch([3]*big.Int{tb, mb, ga}, given, blame)
	}
}

// boundBatch reports the counts of a triplet DeepSpeed accepts that are
// beyond maxBatchCount: the written ones, or when none of those is, the
// derived one.
func (c *compiler) boundBatch(counts [3]*big.Int, given [3]bool, blame func(int) string) {
	limit := big.NewInt(maxBatchCount)
	why := [3]struct{ what, reason, fix string }{
		{"a global batch of %d samples", "so that counting a run's samples (steps × train_batch_size: the data position, checkpoints' global_samples) cannot overflow",
			"use a smaller train_batch_size"},
		{"a micro batch of %d samples per GPU", "and cannot allocate a rank's micro-batch (micro batch × sequence length tokens) that large",
			"use a smaller train_micro_batch_size_per_gpu and more gradient_accumulation_steps"},
		{"%d gradient accumulation steps", "and cannot allocate a loss for each of that many micro-steps",
			"use fewer gradient_accumulation_steps and a larger micro batch"},
	}
	for _, written := range []bool{true, false} {
		found := false
		for i, n := range counts {
			if given[i] != written || n.Cmp(limit) <= 0 {
				continue
			}
			found = true
			path, fix := blame(i), why[i].fix
			if !written {
				fix = "train_batch_size is micro batch × accumulation steps × world size: lower them"
			}
			c.s.unsupportedf(c.at(path), path, fix, "%s: DeepSpeed accepts it; dszero runs at most %d, %s",
				fmt.Sprintf(why[i].what, n), maxBatchCount, why[i].reason)
		}
		if found {
			return
		}
	}
}

// floorDiv is Python's a // b: the quotient rounded toward minus infinity.
// b must not be zero.
func floorDiv(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	if r.Sign() != 0 && r.Sign() != b.Sign() {
		q.Sub(q, big.NewInt(1))
	}
	return q
}

// mul is the exact product of xs.
func mul(xs ...*big.Int) *big.Int {
	p := big.NewInt(1)
	for _, x := range xs {
		p.Mul(p, x)
	}
	return p
}

func maxInt(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// countOf is n for the Plan: n itself when it fits in int64, else 0 (the
// config then has an error or an Unsupported count, and no run uses it).
func countOf(n *big.Int) int64 {
	if n.IsInt64() {
		return n.Int64()
	}
	return 0
}

// settingValue records n as an int64 when it fits, else exactly.
func settingValue(n *big.Int) any {
	if n.IsInt64() {
		return n.Int64()
	}
	return n
}
