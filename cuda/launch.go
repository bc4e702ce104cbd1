package cuda

import (
	"fmt"
	"math/bits"

	"github.com/dszero/dszero/cuda/kernels"
	"github.com/dszero/dszero/device"
)

// The typed launchers: one method per kernel family, taking Mem ranges and
// sizes, choosing the launch shape and the dtype variant. They are what
// the CUDA implementation of the engine's Ops interface calls. Sizes in
// elements; every Mem must hold at least what the sizes say (a shorter
// one is a caller bug and panics before anything is launched).

const elemBlock = 256

// elemShape is a grid-stride launch for n elements: enough blocks to fill
// the GPU, each thread looping over the rest.
func (k *Kernels) elemShape(n int64) (Dim3, Dim3) {
	g := (n + elemBlock - 1) / elemBlock
	g = max(1, min(g, int64(k.d.sms)*16))
	return Dim3{X: uint32(g), Y: 1, Z: 1}, Dim3{X: elemBlock, Y: 1, Z: 1}
}

// rowShape is one block per row of width elements: a power of two giving
// each thread about four elements, 32 to 1024 threads.
func rowShape(rows, width int) (Dim3, Dim3) {
	b := 32
	if q := (width + 3) / 4; q > 32 {
		b = 1 << (64 - bits.LeadingZeros64(uint64(q-1)))
	}
	b = min(b, 1024)
	return Dim3{X: uint32(max(1, min(rows, 1<<30))), Y: 1, Z: 1}, Dim3{X: uint32(b), Y: 1, Z: 1}
}

// colShape is the column-partial launch for N rows of C columns: x over
// columns, y over chunks of rpc rows, about four blocks per SM in all.
func (k *Kernels) colShape(N, C int) (grid, block Dim3, rpc, nchunks int) {
	gx := (C + elemBlock - 1) / elemBlock
	chunks := max(1, min((k.d.sms*4+gx-1)/gx, N, 65535))
	rpc = (N + chunks - 1) / chunks
	nchunks = (N + rpc - 1) / rpc
	return Dim3{X: uint32(gx), Y: uint32(nchunks), Z: 1}, Dim3{X: elemBlock, Y: 1, Z: 1}, rpc, nchunks
}

func need(what string, m Mem, n int64, dt device.DType) {
	if m.n < n*int64(dt.Size()) {
		panic(fmt.Sprintf("cuda: %s is %v, needs %d %v elements", what, m, n, dt))
	}
}

func elems(m Mem, dt device.DType) int64 { return m.n / int64(dt.Size()) }

// Fill sets every element of x (dtype dt) to v, rounded.
func (k *Kernels) Fill(q *Issuer, s *Stream, x Mem, dt device.DType, v float32) error {
	n := elems(x, dt)
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("fill", dt), g, b, P(x), I64(n), F32(v))
}

// Cast converts n elements of src (dtype from) into dst (dtype to):
// between fp32 and a 16-bit type, or a copy for one dtype.
func (k *Kernels) Cast(q *Issuer, s *Stream, dst Mem, to device.DType, src Mem, from device.DType, n int64) error {
	need("Cast dst", dst, n, to)
	need("Cast src", src, n, from)
	if n == 0 {
		return nil
	}
	var name string
	switch {
	case from == to:
		return q.Copy(s, dst.Slice(0, n*int64(to.Size())), src.Slice(0, n*int64(from.Size())))
	case from == device.F32:
		name = k.tab.Name("cast_f32_*", to)
	case to == device.F32:
		name = k.tab.Name("cast_*_f32", from)
	default:
		panic(fmt.Sprintf("cuda: Cast %v to %v: go through fp32", from, to))
	}
	g, b := k.elemShape(n)
	return q.Launch(s, name, g, b, P(dst), P(src), I64(n))
}

// Scale multiplies n elements of x by v.
func (k *Kernels) Scale(q *Issuer, s *Stream, x Mem, dt device.DType, n int64, v float32) error {
	need("Scale x", x, n, dt)
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("scale", dt), g, b, P(x), I64(n), F32(v))
}

// ScaleBy multiplies n elements of x by the float32 at factor (device
// memory: a clip coefficient computed on the GPU).
func (k *Kernels) ScaleBy(q *Issuer, s *Stream, x Mem, dt device.DType, n int64, factor Mem) error {
	need("ScaleBy x", x, n, dt)
	need("ScaleBy factor", factor, 1, device.F32)
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("scale_dev", dt), g, b, P(x), I64(n), P(factor))
}

// Div divides n elements of x by v (IEEE division: PreAvg, predivide).
func (k *Kernels) Div(q *Issuer, s *Stream, x Mem, dt device.DType, n int64, v float32) error {
	need("Div x", x, n, dt)
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("div", dt), g, b, P(x), I64(n), F32(v))
}

// Add writes out = a + b over n elements (out may be a or b).
func (k *Kernels) Add(q *Issuer, s *Stream, out, a, b Mem, dt device.DType, n int64) error {
	need("Add out", out, n, dt)
	need("Add a", a, n, dt)
	need("Add b", b, n, dt)
	if n == 0 {
		return nil
	}
	g, bl := k.elemShape(n)
	return q.Launch(s, k.tab.Name("add", dt), g, bl, P(out), P(a), P(b), I64(n))
}

// Accumulate adds n elements of src (dtype sdt) into dst (dtype ddt):
// ddt is sdt, or fp32 accumulators for a 16-bit gradient.
func (k *Kernels) Accumulate(q *Issuer, s *Stream, dst Mem, ddt device.DType, src Mem, sdt device.DType, n int64) error {
	need("Accumulate dst", dst, n, ddt)
	need("Accumulate src", src, n, sdt)
	if n == 0 {
		return nil
	}
	var name string
	switch {
	case ddt == sdt:
		name = k.tab.Name("accumulate", ddt)
	case ddt == device.F32:
		name = k.tab.Name("accumulate_*_f32", sdt)
	default:
		panic(fmt.Sprintf("cuda: Accumulate %v into %v", sdt, ddt))
	}
	g, b := k.elemShape(n)
	return q.Launch(s, name, g, b, P(dst), P(src), I64(n))
}

// SumSquares writes Σ x² over n elements of x, folded in float64, to out
// (one float64): the squared gradient norm of a partition.
func (k *Kernels) SumSquares(q *Issuer, s *Stream, out Mem, x Mem, dt device.DType, n int64) error {
	return k.sum(q, s, out, x, dt, n, 1)
}

// Sum writes Σ x over n elements, folded in float64, to out (one float64).
func (k *Kernels) Sum(q *Issuer, s *Stream, out Mem, x Mem, dt device.DType, n int64) error {
	return k.sum(q, s, out, x, dt, n, 0)
}

func (k *Kernels) sum(q *Issuer, s *Stream, out, x Mem, dt device.DType, n int64, square int) error {
	need("sum out", out, 1, device.F32)
	need("sum x", x, n, dt)
	if out.n < 8 {
		panic("cuda: sum output needs 8 bytes (a float64)")
	}
	if n == 0 {
		return q.Memset8(s, out.Slice(0, 8), 0)
	}
	g, b := k.elemShape(n)
	g.X = min(g.X, uint32(k.d.sms*4))
	partial, err := q.Alloc(int64(g.X)*8, s)
	if err != nil {
		return err
	}
	if err := q.Launch(s, k.tab.Name("reduce_sum", dt), g, b, P(partial), P(x), I64(n), I32(square)); err != nil {
		return err
	}
	if err := q.Launch(s, "sum_f64", Dim3{X: 1, Y: 1, Z: 1}, Dim3{X: 1024, Y: 1, Z: 1}, P(out), P(partial), I32(int(g.X))); err != nil {
		return err
	}
	return q.Free(partial, s)
}

// AllFinite ORs 1 into the uint32 at flag if any of n elements of x is an
// Inf or NaN (clear flag first; several checks may share it).
func (k *Kernels) AllFinite(q *Issuer, s *Stream, flag Mem, x Mem, dt device.DType, n int64) error {
	need("AllFinite flag", flag, 1, device.F32)
	need("AllFinite x", x, n, dt)
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("all_finite", dt), g, b, P(flag), P(x), I64(n))
}

// ReduceOp is reduce_n's op: package comm's Sum, Avg and PreAvg.
type ReduceOp int

const (
	ReduceSum    ReduceOp = 0
	ReduceAvg    ReduceOp = 1
	ReducePreAvg ReduceOp = 2
)

// ReduceN writes into dst the fixed-rank-order reduction of nsrc buffers
// of n elements whose addresses are the nsrc uint64 at srcs (see
// PointerArray): package comm's Reduce, bit for bit.
func (k *Kernels) ReduceN(q *Issuer, s *Stream, dst Mem, dt device.DType, srcs Mem, nsrc int, n int64, op ReduceOp) error {
	need("ReduceN dst", dst, n, dt)
	if srcs.n < int64(8*nsrc) || nsrc < 1 {
		panic(fmt.Sprintf("cuda: ReduceN of %d sources from %v", nsrc, srcs))
	}
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("reduce_n", dt), g, b, P(dst), P(srcs), I32(nsrc), I64(n), I32(int(op)))
}

// PointerArray uploads the addresses of ms as a device array of uint64
// (for ReduceN). Free it with Free when done.
func (d *Device) PointerArray(ms []Mem) (Mem, error) {
	buf := make([]byte, 8*len(ms))
	for i, m := range ms {
		v := uint64(m.ptr)
		for j := range 8 {
			buf[8*i+j] = byte(v >> (8 * j))
		}
	}
	m, err := d.Alloc(int64(len(buf)), d.aux)
	if err != nil {
		return Mem{}, err
	}
	return m, d.Upload(m, buf)
}

// Adam runs one fused Adam/AdamW step over n fp32 master parameters p with
// gradients g and moments m, v, writing the updated parameters also to
// p16 as p16dt (BF16 or F16) unless p16 is null. a comes from
// kernels.TorchAdamArgs or kernels.DeepSpeedAdamArgs.
func (k *Kernels) Adam(q *Issuer, s *Stream, p, g, m, v Mem, n int64, p16 Mem, p16dt device.DType, a kernels.AdamArgs) error {
	for _, x := range []struct {
		name string
		m    Mem
	}{{"p", p}, {"g", g}, {"m", m}, {"v", v}} {
		need("Adam "+x.name, x.m, n, device.F32)
	}
	kind := p16kind(p16, p16dt, n)
	if n == 0 {
		return nil
	}
	gr, b := k.elemShape(n)
	return q.Launch(s, "adam_f32", gr, b, P(p), P(g), P(m), P(v), P(p16), I64(n), I32(int(a.Mode)), I32(kind),
		F32(a.B1), F32(a.OmB1), F32(a.B2), F32(a.OmB2), F32(a.BC2), F32(a.Eps), F32(a.SS), F32(a.Decay), F32(a.WeightDecay))
}

func p16kind(p16 Mem, dt device.DType, n int64) int {
	if p16.IsNull() {
		return 0
	}
	need("16-bit parameter copy", p16, n, dt)
	switch dt {
	case device.BF16:
		return 1
	case device.F16:
		return 2
	}
	panic(fmt.Sprintf("cuda: a 16-bit parameter copy of dtype %v", dt))
}

// SGDArgs are torch.optim.SGD's hyper-parameters for one step (Python
// floats, rounded to float32 where the kernel takes them, as package
// zero/optim does).
type SGDArgs struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	// First is the first step with momentum: the buffer starts as a copy
	// of the gradient.
	First bool
}

// SGD runs one torch.optim.SGD step (momentum buffer buf, null without
// momentum), with an optional 16-bit copy as for Adam.
func (k *Kernels) SGD(q *Issuer, s *Stream, p, g, buf Mem, n int64, p16 Mem, p16dt device.DType, a SGDArgs) error {
	need("SGD p", p, n, device.F32)
	need("SGD g", g, n, device.F32)
	useBuf := a.Momentum != 0
	if useBuf {
		need("SGD momentum buffer", buf, n, device.F32)
	}
	kind := p16kind(p16, p16dt, n)
	if n == 0 {
		return nil
	}
	gr, b := k.elemShape(n)
	return q.Launch(s, "sgd_f32", gr, b, P(p), P(g), P(buf), P(p16), I64(n), I32(kind),
		I32(b2i(a.WeightDecay != 0)), I32(b2i(useBuf)), I32(b2i(a.Nesterov)), I32(b2i(a.First)),
		F32(float32(a.WeightDecay)), F32(float32(a.Momentum)), F32(float32(1-a.Dampening)), F32(float32(-a.LR)))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
