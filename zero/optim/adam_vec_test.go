package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// f32gen draws float32 values from the classes where a vector kernel could
// part from the scalar one: zeros of both signs, subnormals, the smallest
// and largest normals, values with few significand bits (their products and
// sums often land on float32 midpoints, the fma32 slow path), Inf and NaN
// with random payloads.
type f32gen struct {
	r   *rand.Rand
	nan bool // may return NaN
}

func (s f32gen) next() float32 {
	r := s.r
	sign := float32(1)
	if r.IntN(2) == 0 {
		sign = -1
	}
	switch c := r.IntN(100); {
	case c < 4:
		return sign * 0
	case c < 10: // subnormal
		return sign * math.Float32frombits(1+r.Uint32N(1<<23-1))
	case c < 14: // tiny normal
		return sign * float32(math.Ldexp(1+r.Float64(), -126+r.IntN(20)))
	case c < 18: // huge
		return sign * float32(math.Ldexp(1+r.Float64(), 100+r.IntN(28)))
	case c < 35: // few significand bits
		return sign * float32(math.Ldexp(float64(1+r.IntN(64)), -20+r.IntN(30)))
	case c < 37:
		return sign * float32(math.Inf(1))
	case c < 40 && s.nan:
		return math.Float32frombits(0x7FC00000 | r.Uint32N(1<<22) | uint32(r.IntN(2))<<31)
	default: // what training sees
		return sign * float32(math.Ldexp(r.Float64(), -r.IntN(30)))
	}
}

func (s f32gen) fill(x []float32) {
	for i := range x {
		x[i] = s.next()
	}
}

// vecTestKernels returns Adam kernels of every vectorised mode: the scalars
// of real configurations at a few steps, then random scalars (the kernels
// must agree for any float32 inputs, not only sensible ones).
func vecTestKernels(r *rand.Rand) []adamKernel {
	var ks []adamKernel
	for _, cfg := range []AdamConfig{
		DefaultAdamConfig(TorchAdamW),
		{Flavor: TorchAdamW, LR: 3e-4, Betas: [2]float64{0.85, 0.99}, Eps: 1e-6, WeightDecay: 0.1},
		DefaultAdamConfig(TorchAdam),
		{Flavor: TorchAdam, LR: 1e-2, Betas: [2]float64{0.8, 0.9}, Eps: 1e-8, WeightDecay: 0.01},
		DefaultAdamConfig(DeepSpeedAdam),
		{Flavor: DeepSpeedAdam, LR: 1e-3, Betas: [2]float64{0.9, 0.95}, Eps: 1e-8, WeightDecay: 0.1, AdamWMode: true, BiasCorrection: true},
		{Flavor: DeepSpeedAdam, LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01, BiasCorrection: true},
		{Flavor: DeepSpeedAdam, LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01, AdamWMode: true},
	} {
		o, err := NewAdam(cfg, 0, testAlloc(), nil)
		if err != nil {
			panic(err)
		}
		for _, step := range []int64{1, 7, 1000} {
			o.SetStepCount(step - 1)
			o.steps++
			if cfg.Flavor == DeepSpeedAdam {
				o.prepareDeepSpeed()
			} else {
				o.prepareTorch()
			}
			ks = append(ks, o.k)
		}
	}
	s := f32gen{r: r}
	for mode := kTorchAdam; mode <= kDeepSpeed; mode++ {
		for range 4 {
			k := adamKernel{mode: mode, decay: s.next(), wd: s.next(), b1: s.next(), omb1: s.next(),
				b2: s.next(), omb2: s.next(), bc2: s.next(), eps: s.next(), ss: s.next()}
			if mode == kDeepSpeed {
				k.dsL2, k.dsDecoupled = r.IntN(2) == 0, r.IntN(2) == 0
			}
			ks = append(ks, k)
		}
	}
	return ks
}

func (k *adamKernel) scalarsString() string {
	return fmt.Sprintf("mode %d l2 %v dec %v decay %g wd %g b1 %g omb1 %g b2 %g omb2 %g bc2 %g eps %g ss %g",
		k.mode, k.dsL2, k.dsDecoupled, k.decay, k.wd, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss)
}

// checkVecScalar runs Chunk(lo, hi) (vector body, scalar tail) and the
// scalar kernel alone on copies of the same buffers and compares every
// element of p, m and v bit for bit, outside [lo, hi) too. A NaN only has to
// be a NaN: where two NaNs meet in one operation, which payload survives
// depends on the operand order the Go compiler picks for the scalar code
// (torch's vector and scalar-tail code differ the same way).
func checkVecScalar(t *testing.T, k adamKernel, p, g, m, v []float32, lo, hi int) {
	t.Helper()
	cp := func(x []float32) []float32 { return append([]float32(nil), x...) }
	vk, sk := k, k
	vk.p, vk.g, vk.m, vk.v = cp(p), g, cp(m), cp(v)
	sk.p, sk.g, sk.m, sk.v = cp(p), g, cp(m), cp(v)
	vk.Chunk(lo, hi)
	sk.scalar(lo, hi)
	for _, b := range []struct {
		name       string
		in, vx, sx []float32
	}{{"p", p, vk.p, sk.p}, {"m", m, vk.m, sk.m}, {"v", v, vk.v, sk.v}} {
		for i := range b.vx {
			vb, sb := math.Float32bits(b.vx[i]), math.Float32bits(b.sx[i])
			if vb != sb && !(b.vx[i] != b.vx[i] && b.sx[i] != b.sx[i]) {
				t.Fatalf("%s\n[%d, %d) %s[%d]: vector %#08x (%g), scalar %#08x (%g); inputs p %g g %g m %g v %g",
					k.scalarsString(), lo, hi, b.name, i, vb, b.vx[i], sb, b.sx[i],
					p[i], g[i], m[i], v[i])
			}
		}
	}
}

// The AVX2 kernels give every element the scalar kernels' bits: random
// inputs from every float32 class (NaN with payloads), every vectorised
// mode, lengths 0..40 at every offset modulo 8, and a long partition that
// spans several assembly blocks with a ragged tail.
func TestAdamVectorMatchesScalarBitForBit(t *testing.T) {
	if !haveAVX2FMA {
		t.Skip("no AVX2+FMA kernels in this build or on this CPU")
	}
	r := rand.New(rand.NewPCG(7, 8))
	s := f32gen{r: r, nan: true}
	// The long buffers: two assembly blocks and a ragged tail, 3 elements
	// off the allocation's alignment; every kernel reads the same ones.
	long := vecBlock + 8*r.IntN(vecBlock/8) + 13
	if testing.Short() {
		long = vecBlock/4 + 13
	}
	lp, lg, lm, lv := make([]float32, long+3), make([]float32, long+3), make([]float32, long+3), make([]float32, long+3)
	for _, x := range [][]float32{lp, lg, lm, lv} {
		s.fill(x)
	}
	for _, k := range vecTestKernels(r) {
		const pad = 48
		p, g, m, v := make([]float32, pad), make([]float32, pad), make([]float32, pad), make([]float32, pad)
		for n := 0; n <= 40; n++ {
			for off := 0; off < 8 && off+n <= pad; off++ {
				for _, x := range [][]float32{p, g, m, v} {
					s.fill(x[off : off+n])
				}
				checkVecScalar(t, k, p, g, m, v, off, off+n)
			}
		}
		checkVecScalar(t, k, lp, lg, lm, lv, 3, long+3)
	}
}

// An Adam step allocates nothing on the vector path either, over several
// assembly blocks and a ragged tail, with and without a pool.
func TestAdamVectorStepAllocatesNothing(t *testing.T) {
	const n = 2*vecBlock + 37
	pool := NewPool(2)
	defer pool.Close()
	p, g := make([]float32, n), make([]float32, n)
	f32gen{r: rand.New(rand.NewPCG(1, 1))}.fill(g)
	l2 := DefaultAdamConfig(TorchAdam)
	l2.WeightDecay = 0.01
	for _, cfg := range []AdamConfig{DefaultAdamConfig(TorchAdamW), DefaultAdamConfig(TorchAdam), l2, DefaultAdamConfig(DeepSpeedAdam)} {
		for _, pl := range []*Pool{nil, pool} {
			o, err := NewAdam(cfg, n, testAlloc(), pl)
			if err != nil {
				t.Fatal(err)
			}
			o.Step(p, g)
			if allocs := testing.AllocsPerRun(5, func() { o.Step(p, g) }); allocs != 0 {
				t.Errorf("%s (%d workers): %v allocations per step", o.Name(), pl.Workers(), allocs)
			}
			o.Free()
		}
	}
}
