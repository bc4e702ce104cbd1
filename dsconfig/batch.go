package dsconfig

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig/lenient"
)

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
// then checks TB > 0, MB > 0, GA > 0 and TB == MB × GA × W.
func (c *compiler) readBatch(top *block) {
	keys := [3]string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
	var val [3]int64
	var given [3]bool
	var fields [3]*field
	bad := false
	for i, k := range keys {
		f := top.get(k)
		fields[i] = f
		if f.source == FromAutoDefault {
			bad = true // "auto" already reported
			continue
		}
		if f.v == nil || f.v.Kind == lenient.Null {
			continue
		}
		if f.v.Kind == lenient.Number {
			if n, ok := f.v.Int64(); ok {
				val[i], given[i] = n, true
				continue
			}
		}
		bad = true
		if f.v.Kind == lenient.String {
			f.errorf("write the number without quotes", "%s is the string %s: DeepSpeed does arithmetic with it and fails with a TypeError", k, quoteStr(f.v.Str))
		} else {
			f.errorf("write a whole number", "%s must be a whole number, got %s", k, describe(f.v))
		}
	}
	b := &c.plan.Batch
	record := func() {
		for i, f := range fields {
			if f.source == FromDefault {
				f.source = FromDerived
			}
			f.v = c.at(keys[i])
			f.record([]int64{b.TrainBatchSize, b.TrainMicroBatchSizePerGPU, b.GradientAccumulationSteps}[i])
		}
	}
	if c.plan.elastic {
		return
	}
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
	tb, mb, ga := val[0], val[1], val[2]
	switch {
	case given[0] && given[1] && given[2]:
	case given[0] && given[1]:
		ga = tb / mb / world
		if mb == 0 {
			ga = 0
		}
	case given[0] && given[2]:
		mb = tb / world
		if ga != 0 {
			mb /= ga
		} else {
			mb = 0
		}
	case given[1] && given[2]:
		tb = mb * ga * world
	case given[0]:
		ga, mb = 1, tb/world
	case given[1]:
		tb, ga = mb*world, 1
	}
	*b = Batch{TrainBatchSize: tb, TrainMicroBatchSizePerGPU: mb, GradientAccumulationSteps: ga}
	record()
	pos := func(i int) *lenient.Value { return c.at(keys[i]) }
	switch {
	case tb <= 0:
		c.s.errorf(pos(0), keys[0], "use a positive global batch size", "Train batch size: %d has to be greater than 0", tb)
	case mb <= 0:
		fix := "use a positive micro-batch size"
		if given[0] && !given[1] {
			fix = fmt.Sprintf("train_batch_size %d is smaller than world size %d × gradient_accumulation_steps %d: raise it to a multiple of %d, or give train_micro_batch_size_per_gpu instead", tb, world, max(ga, 1), world*max(ga, 1))
		}
		mbPath := keys[1]
		if given[0] && !given[1] {
			mbPath = keys[0]
		}
		c.s.errorf(pos(0), mbPath, fix, "Micro batch size per gpu: %d has to be greater than 0", mb)
	case ga <= 0:
		fix := "use a positive number of accumulation steps"
		if !given[2] {
			fix = fmt.Sprintf("train_batch_size %d is smaller than micro batch %d × world size %d: set train_batch_size to %d (or a multiple), or give gradient_accumulation_steps instead", tb, mb, world, mb*world)
		}
		gaPath := keys[2]
		if !given[2] {
			gaPath = keys[0]
		}
		c.s.errorf(pos(0), gaPath, fix, "Gradient accumulation steps: %d has to be greater than 0", ga)
	case tb != mb*ga*world:
		fix := fmt.Sprintf("with %d data-parallel ranks set train_batch_size to %d, or remove it and let it be derived", world, mb*ga*world)
		if !(given[0] && given[1] && given[2]) {
			fix = fmt.Sprintf("train_batch_size %d is not divisible by micro batch × world size; use a multiple of %d", tb, mb*world)
		}
		c.s.errorf(pos(0), "train_batch_size", fix,
			"train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size: %d != %d * %d * %d", tb, mb, ga, world)
	}
}
