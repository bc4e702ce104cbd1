package commtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// CompressedLengths is the buffer lengths of CheckCompressed: empty, shorter
// than the world, odd (ragged chunks), not a multiple of 16 per chunk, and
// DeepSpeed's padded length for 4 ranks (a multiple of 4·lcm(4, 8)).
func CompressedLengths() []int { return []int{0, 1, 5, 33, 1000, 4099, 4096} }

// CompressedSteps is how many calls in a row CheckCompressed makes per
// length, so that error feedback from earlier calls shapes later ones.
const CompressedSteps = 5

// CheckCompressed runs comm.Compressor.AllReduce on c for every length of
// CompressedLengths, CompressedSteps calls each with fresh inputs, and
// compares the result and the rank's worker and server errors after each
// call with CompressedModel, a float64 model of the algorithm that every
// rank runs for all ranks alone. Every rank of c must call it.
func CheckCompressed(ctx context.Context, c comm.Comm) error {
	n, me := c.Size(), c.Rank()
	z := comm.NewCompressor(c)
	for _, N := range CompressedLengths() {
		ef := comm.NewErrorFeedback(N, n, me)
		model := NewCompressedModel(N, n)
		for step := range CompressedSteps {
			inputs := make([][]float64, n)
			for r := range n {
				inputs[r] = compressedInput(N, r, step)
			}
			want := model.Step(inputs)
			x := make([]float32, N)
			for i, v := range inputs[me] {
				x[i] = float32(v)
			}
			if err := z.AllReduce(ctx, x, &ef); err != nil {
				return fmt.Errorf("length %d, call %d: %w", N, step+1, err)
			}
			what := fmt.Sprintf("rank %d, length %d, call %d", me, N, step+1)
			ref := maxAbs(maxAbs(0, want), inputs[me])
			if err := near(what+": result", want, x, ref); err != nil {
				return err
			}
			if err := near(what+": worker error", model.Worker[me], ef.Worker, ref); err != nil {
				return err
			}
			if err := near(what+": server error", model.Server[me], ef.Server, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// compressedInput is rank r's input at a call: values of mixed magnitude
// and sign, a few exact zeros (σ(0) = +1).
func compressedInput(N, r, step int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(N)*7919+uint64(step), uint64(r)+1))
	v := make([]float64, N)
	for i := range v {
		switch rng.IntN(10) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = rng.NormFloat64() * 100
		default:
			v[i] = rng.NormFloat64()
		}
		v[i] = float64(float32(v[i]))
	}
	return v
}

func maxAbs(m float64, x []float64) float64 {
	for _, v := range x {
		m = max(m, math.Abs(v))
	}
	return m
}

// near compares got with want to 2e-5 of ref, the call's largest input or
// result magnitude (float32 against float64 after a few calls of error
// feedback).
func near(what string, want []float64, got []float32, ref float64) error {
	if len(want) != len(got) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	tol := 2e-5*ref + 1e-30
	for i, w := range want {
		if d := math.Abs(float64(got[i]) - w); !(d <= tol) {
			return fmt.Errorf("%s: element %d is %g, want %g (tolerance %g)", what, i, got[i], w, tol)
		}
	}
	return nil
}

// CompressedModel is the compressed all-reduce of DeepSpeed's
// compressed_allreduce, for all ranks at once, in float64, written from
// the Python (deepspeed/runtime/comm/nccl.py) independently of package
// comm: no packing, no wire, the errors of every rank.
type CompressedModel struct {
	N, Size int
	Worker  [][]float64 // per rank, N elements
	Server  [][]float64 // per rank, its chunk
}

// NewCompressedModel is the model with zero errors.
func NewCompressedModel(N, size int) *CompressedModel {
	m := &CompressedModel{N: N, Size: size, Worker: make([][]float64, size), Server: make([][]float64, size)}
	for r := range size {
		lo, hi := N*r/size, N*(r+1)/size
		m.Worker[r] = make([]float64, N)
		m.Server[r] = make([]float64, hi-lo)
	}
	return m
}

// Step is one call: every rank's input in, the common result out.
func (m *CompressedModel) Step(inputs [][]float64) []float64 {
	n, N := m.Size, m.N
	sgn := func(v float64) float64 {
		if v < 0 {
			return -1
		}
		return 1
	}
	scale := func(x []float64) float64 {
		if len(x) == 0 {
			return 0
		}
		var sq float64
		for _, v := range x {
			sq += v * v
		}
		return math.Sqrt(sq) / math.Sqrt(float64(len(x)))
	}
	signs := make([][]float64, n)
	scales := make([]float64, n)
	for r := range n {
		x := make([]float64, N)
		for i := range x {
			x[i] = inputs[r][i] + m.Worker[r][i]
		}
		scales[r] = scale(x)
		signs[r] = make([]float64, N)
		for i, v := range x {
			signs[r][i] = sgn(v)
			m.Worker[r][i] = v - scales[r]*sgn(v)
		}
	}
	out := make([]float64, N)
	for j := range n {
		lo, hi := N*j/n, N*(j+1)/n
		y := make([]float64, hi-lo)
		for i := range y {
			for r := range n {
				y[i] += signs[r][lo+i] * scales[r] / float64(n)
			}
			y[i] += m.Server[j][i]
		}
		t := scale(y)
		for i, v := range y {
			m.Server[j][i] = v - t*sgn(v)
			out[lo+i] = t * sgn(v)
		}
	}
	return out
}

// CheckAllToAll checks comm.AllToAller's all_to_all on c, bit for bit, for
// the suite's lengths per chunk and every dtype. Every rank of c calls it.
func CheckAllToAll(ctx context.Context, c comm.AllToAller) error {
	n, me := c.Size(), c.Rank()
	for _, dt := range []device.DType{device.F32, device.F16, device.BF16} {
		for _, m := range Lengths() {
			tc := Case{Kind: comm.KindAllToAll, DType: dt, Len: n * m}
			in := Encode(dt, Values(tc, me, n*m))
			out := Encode(dt, make([]float32, n*m))
			if err := c.AllToAll(ctx, out, in).Wait(); err != nil {
				return fmt.Errorf("%v: %w", tc, err)
			}
			var want []uint32
			for k := range n {
				want = append(want, Bits(Encode(dt, Values(tc, k, n*m)[me*m:(me+1)*m]))...)
			}
			if err := diffBits(fmt.Sprintf("%v on rank %d", tc, me), want, Bits(out)); err != nil {
				return err
			}
		}
	}
	return nil
}
