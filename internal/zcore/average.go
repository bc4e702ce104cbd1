package zcore

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/zero/optim"
)

// Averaging is how DeepSpeed turns the ranks' gradients into their mean
// around a reduction that SUMs them. There are two rules, and which one a
// run follows depends on the stage, not on the backend:
//
//   - the engine's (stage 0, and stages 1/2 with reduce_scatter false):
//     engine.allreduce_bucket / gradient_reduction_w_predivide. With
//     prescale_gradients, g ← g·(1/world) before the sum. Otherwise
//     g ← g·(1/predivide) before it when predivide ≠ 1, and
//     g ← g·(predivide/world) after it when predivide ≠ world.
//   - ZeRO-1/2 with reduce_scatter (the default): average_tensor divides,
//     g ← g / world (tensor.div_), before the sum and nothing after;
//     prescale_gradients and gradient_predivide_factor play no part.
//
// Multipliers are the Python double rounded to the dtype of the tensor
// they multiply (tensor.mul_ of a float: torch casts the scalar to the
// tensor's dtype, so a 16-bit sum is multiplied by bf16(1/3) =
// 0.333984375, not by 1/3); the ZeRO division is a float32 division,
// rounded. For a power-of-two
// world every rule is exact, so the average is the same bits whichever
// rule and whichever place the reduction happens in.
//
// Dtypes (In): DeepSpeed reduces a bucket of gradients held in the
// bucket's dtype (the gradient accumulation dtype at stage 0, the model's
// at stages 1 and 2) in communication_data_type. The engine's rule casts
// the bucket to the communication dtype (tensor.to), scales and sums it
// there, and copies the result back into the bucket (tensor.copy_); the
// ZeRO rule divides in the bucket's dtype first, then casts. Every 16-bit
// operation rounds its result. Wire and Unwire move a bucket to and from
// its form on the wire: 16-bit values packed into the bucket's own memory.
type Averaging struct {
	World int
	pre   float32 // multiply before the sum; 0: none
	div   float32 // divide before the sum; 0: none
	post  float32 // multiply after the sum; 0: none

	bucket device.DType // the dtype the bucket is held in
	comm   device.DType // the dtype of the sum (communication_data_type)
}

// In returns the rule with the bucket held in dtype bucket and summed in
// dtype comm (both device.F32 by default).
func (a Averaging) In(bucket, comm device.DType) Averaging {
	a.bucket, a.comm = bucket, comm
	return a
}

// EngineAveraging is the engine's rule (see Averaging).
func EngineAveraging(world int, prescale bool, predivide float64) Averaging {
	a := Averaging{World: world}
	w := float64(world)
	if prescale {
		if world != 1 {
			a.pre = float32(1 / w)
		}
		return a
	}
	if predivide == 0 {
		predivide = 1
	}
	if predivide != 1 {
		a.pre = float32(1 / predivide)
	}
	if predivide != w {
		a.post = float32(predivide / w)
	}
	return a
}

// ZeroAveraging is ZeRO-1/2's rule with reduce_scatter (see Averaging).
func ZeroAveraging(world int) Averaging {
	a := Averaging{World: world}
	if world != 1 {
		a.div = float32(world)
	}
	return a
}

// Before applies the rule's part before the sum to x, in place, and
// returns the op of the sum: x rounded to the bucket's dtype (a no-op when
// it holds that dtype already), the division in that dtype, the cast to
// the communication dtype, the multiplication in it; comm.Sum.
//
// When the sum runs over size ranks and the rule's only part before it is
// ZeRO's division by size, in a bucket held in the communication dtype,
// Before leaves the division to the reduction and returns comm.PreAvg,
// which divides each rank's values as it reads them: the same bits, one
// pass over the gradients fewer. Hybrid sharding, which divides by the
// whole world before a sum within a group, divides here.
func (a Averaging) Before(p *optim.Pool, x []float32, size int) comm.Op {
	toBucket := Rounding(a.bucket)
	round(toBucket, x)
	if a.div != 0 && a.div == float32(size) && a.pre == 0 && a.bucket == a.comm {
		return comm.PreAvg
	}
	toComm := Rounding(a.comm)
	if a.div != 0 {
		p.Divide(x, a.div)
		round(toBucket, x)
	}
	round(toComm, x)
	if a.pre != 0 {
		p.Scale(x, ScalarIn(a.comm, a.pre))
		round(toComm, x)
	}
	return comm.Sum
}

// After applies the rule's part after the sum to x, in place: the
// multiplication in the communication dtype, and the copy back into the
// bucket's dtype.
func (a Averaging) After(p *optim.Pool, x []float32) {
	if a.post != 0 {
		p.Scale(x, ScalarIn(a.comm, a.post))
		round(Rounding(a.comm), x)
	}
	round(Rounding(a.bucket), x)
}

// Final reports whether the sum is the rule's result as it is: fp32 on
// the wire and in the bucket, and nothing after the sum (After and
// Unwire do nothing). A stage may then have the sum written straight
// into its destination.
func (a Averaging) Final() bool {
	return a.post == 0 && a.bucket == device.F32 && a.comm == device.F32
}

// Wire is x, which Before has prepared, as the buffer the sum runs on:
// x itself in fp32; in 16 bits its values packed into x's own memory
// (half.PackBF16), which then holds no float32 values until Unwire.
func (a Averaging) Wire(x []float32) comm.Buffer {
	switch a.comm {
	case device.BF16:
		return comm.BF16(half.PackBF16(x))
	case device.F16:
		return comm.F16(half.PackF16(x))
	}
	return comm.F32(x)
}

// Unwire widens elements [lo, hi) of x, which Wire packed, back to
// float32 (nothing to do in fp32).
func (a Averaging) Unwire(x []float32, lo, hi int) {
	switch a.comm {
	case device.BF16:
		half.UnpackBF16(x, lo, hi)
	case device.F16:
		half.UnpackF16(x, lo, hi)
	}
}

// AllReduceWire reduces buf, a wire buffer, with op across c's ranks in
// calls of at most size elements (see AllReduce; hs is the caller's
// scratch).
func AllReduceWire(ctx context.Context, c comm.Comm, buf comm.Buffer, op comm.Op, size int, hs []comm.Handle) ([]comm.Handle, error) {
	if c.Size() == 1 {
		return hs, nil
	}
	hs = hs[:0]
	Chunks(buf.Len(), size, func(lo, hi int) {
		hs = append(hs, c.AllReduce(ctx, buf.Slice(lo, hi), op))
	})
	err := comm.WaitAll(hs...)
	clear(hs)
	return hs[:0], err
}

// Rounding is the rounding to dt (nil for fp32): what the model, a stage
// or a collective emulates a 16-bit tensor with.
func Rounding(dt device.DType) func([]float32) {
	switch dt {
	case device.BF16:
		return half.RoundBF16
	case device.F16:
		return half.RoundF16
	}
	return nil
}

// ScalarIn is s as torch multiplies a tensor of dtype dt by it
// (tensor.mul_(s) with a Python float): rounded to dt. The product of two
// 16-bit values is exact in float32, so Scale followed by the rounding of
// its result gives torch's bits.
func ScalarIn(dt device.DType, s float32) float32 {
	if r := Rounding(dt); r != nil {
		v := []float32{s}
		r(v)
		return v[0]
	}
	return s
}

func round(r func([]float32), x []float32) {
	if r != nil {
		r(x)
	}
}

// GradDTypes are the dtypes DeepSpeed 0.14.5 keeps and reduces gradients
// in (engine.get_data_types, communication_data_type).
type GradDTypes struct {
	Model device.DType // the model's: the parameters, each backward's gradients
	// Accum is the dtype the gradients accumulate in over the micro-steps
	// of a step (data_types.grad_accum_dtype): each micro-step's sum is
	// rounded to it.
	Accum device.DType
	Comm  device.DType // communication_data_type: the reduction's
}

// DeepSpeedGradDTypes resolves the dtypes of a ZeRO stage from a plan's
// training dtype and its names of the accumulation and communication
// dtypes ("fp32", "fp16", "bf16"; "" for unset): the communication dtype
// defaults to the model's (engine.communication_data_type); the
// accumulation dtype defaults to the model's, except fp32 for bf16 without ZeRO (BF16_Optimizer's fp32
// gradients). Stage 2 accumulates in the model's dtype whatever
// grad_accum_dtype says (its averaged gradients are views of the 16-bit
// gradients: stage_1_and_2.py get_flat_partition), and so does fp16 at
// stage 0 (FP16_Optimizer's fp16 .grad). A compiled plan has only these
// names; any other (a hand-built plan's), or an invalid model dtype, is
// an error naming the field.
func DeepSpeedGradDTypes(stage int, model device.DType, accum, comm string) (GradDTypes, error) {
	if !model.Valid() {
		return GradDTypes{}, fmt.Errorf("zcore: the training dtype (fp16/bf16.enabled) %v: want fp32, fp16 or bf16", model)
	}
	d := GradDTypes{Model: model, Accum: model, Comm: model}
	if d.Model == device.BF16 && stage == 0 {
		d.Accum = device.F32
	}
	// The name is checked even where the stage ignores it.
	acc, err := parseDType("data_types.grad_accum_dtype", accum)
	if err != nil {
		return GradDTypes{}, err
	}
	if accum != "" && stage != 2 && !(stage == 0 && d.Model == device.F16) {
		d.Accum = acc
	}
	if comm != "" {
		if d.Comm, err = parseDType("communication_data_type", comm); err != nil {
			return GradDTypes{}, err
		}
	}
	return d, nil
}

// parseDType reads a plan's dtype name (device.ParseDType); "" is fp32.
func parseDType(field, s string) (device.DType, error) {
	if s == "" {
		return device.F32, nil
	}
	d, err := device.ParseDType(s)
	if err != nil {
		return 0, fmt.Errorf("zcore: %s %q: want fp32, fp16 or bf16", field, s)
	}
	return d, nil
}
