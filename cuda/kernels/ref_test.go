package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/optim"
	"github.com/google/go-cmp/cmp"
)

// TestFma32 checks fma32 against the exactly computed a·b + c rounded
// once, on values whose sums often land on float32 midpoints below the
// reach of a float64 sum.
func TestFma32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	val := func() float32 {
		k := float64(r.IntN(1<<12) - 1<<11)
		return float32(math.Ldexp(k, r.IntN(90)-70))
	}
	midpoints := 0
	type triple struct{ a, b, c float32 }
	var cases []triple
	for range 100000 {
		cases = append(cases, triple{val(), val(), val()})
	}
	// a·b = h·(1 - 2^-46) with h half an ulp of c: the exact sum lies a hair
	// below the midpoint of c and its upper neighbour, where the float64 sum
	// lands exactly; with c's last bit odd a float32 rounding of that sum
	// goes up, wrongly.
	for range 2000 {
		c := math.Float32frombits(uint32(r.IntN(200)+20)<<23 | uint32(r.IntN(1<<22))<<1 | 1)
		h := float32(math.Ldexp(1, math.Ilogb(float64(c))-24))
		a, b := h*(1+0x1p-23), float32(1-0x1p-23)
		sign := float32(1 - 2*r.IntN(2))
		cases = append(cases, triple{sign * a, b, sign * c}, triple{b, sign * a, sign * c})
	}
	for _, tc := range cases {
		a, b, c := tc.a, tc.b, tc.c
		exact := new(big.Float).SetPrec(400).SetFloat64(float64(a))
		exact.Mul(exact, new(big.Float).SetFloat64(float64(b)))
		exact.Add(exact, new(big.Float).SetFloat64(float64(c)))
		want, _ := exact.Float32()
		if exact.Sign() == 0 {
			want = float32(float64(a)*float64(b) + float64(c)) // the sign of an exact zero
		}
		if got := fma32(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
		if s := float64(a)*float64(b) + float64(c); float32(s) != want {
			midpoints++ // float64 then float32 would have been wrong
		}
	}
	if midpoints < 10 {
		t.Errorf("only %d double-rounding cases exercised", midpoints)
	}
	if got := fma32(float32(math.Inf(1)), 1, 1); !math.IsInf(float64(got), 1) {
		t.Errorf("fma32(Inf, 1, 1) = %v", got)
	}
}

// TestAdamMatchesZeroOptim runs adam_f32's reference with the scalars of
// TorchAdamArgs and DeepSpeedAdamArgs against package zero/optim's CPU
// optimizer, bit for bit, over several steps.
func TestAdamMatchesZeroOptim(t *testing.T) {
	const n, steps = 517, 4
	cases := map[string]optim.AdamConfig{}
	for _, wd := range []float64{0, 0.1} {
		c := optim.DefaultAdamConfig(optim.TorchAdam)
		c.WeightDecay, c.LR = wd, 3e-3
		cases["torch Adam wd "+ftoa(wd)] = c
		c = optim.DefaultAdamConfig(optim.TorchAdamW)
		c.WeightDecay, c.LR = wd, 3e-3
		cases["torch AdamW wd "+ftoa(wd)] = c
		for _, wmode := range []bool{true, false} {
			c = optim.DefaultAdamConfig(optim.DeepSpeedAdam)
			c.WeightDecay, c.AdamWMode, c.LR = wd, wmode, 3e-3
			cases["DeepSpeed adam_w_mode "+btoa(wmode)+" wd "+ftoa(wd)] = c
		}
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := optim.NewAdam(cfg, n, optim.Alloc{Acct: mem.NewAccountant(0), Tier: mem.Device}, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := randn(3, n, 1)
			cpuP := slices.Clone(p)
			m := &hostMem{}
			pa, ma, va := m.f32(p), m.zeros(device.F32, n), m.zeros(device.F32, n)
			p16 := m.zeros(device.BF16, n)
			b1t, b2t := float32(1), float32(1)
			for step := int64(1); step <= steps; step++ {
				g := randn(uint64(10+step), n, 0.01)
				o.Step(cpuP, g)
				var a AdamArgs
				if cfg.Flavor == optim.DeepSpeedAdam {
					b1t, b2t = b1t*float32(cfg.Betas[0]), b2t*float32(cfg.Betas[1])
					a = DeepSpeedAdamArgs(cfg, b1t, b2t)
				} else {
					a = TorchAdamArgs(cfg, step)
				}
				launch(t, m, "adam_f32", 3, 64, pa, m.f32(g), ma, va, p16, n, int(a.Mode), 1,
					a.B1, a.OmB1, a.B2, a.OmB2, a.BC2, a.Eps, a.SS, a.Decay, a.WeightDecay)
				got := m.read(t, device.F32, pa, n)
				if d := cmp.Diff(f32bits(cpuP), f32bits(got)); d != "" {
					t.Fatalf("step %d: parameters differ from zero/optim (-cpu +ref):\n%s", step, d)
				}
				for _, s := range []struct {
					name string
					addr uint64
				}{{"exp_avg", ma}, {"exp_avg_sq", va}} {
					if d := cmp.Diff(f32bits(o.State(s.name)), f32bits(m.read(t, device.F32, s.addr, n))); d != "" {
						t.Fatalf("step %d: %s differs (-cpu +ref):\n%s", step, s.name, d)
					}
				}
				want16 := make([]uint16, n)
				half.F32ToBF16(want16, cpuP)
				if d := cmp.Diff(want16, m.readBits(t, p16, n)); d != "" {
					t.Fatalf("step %d: the bf16 copy is not the rounded parameters:\n%s", step, d)
				}
			}
		})
	}
}

func TestSGDMatchesZeroOptim(t *testing.T) {
	const n = 300
	for _, cfg := range []optim.SGDConfig{
		{LR: 0.1},
		{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01},
		{LR: 0.05, Momentum: 0.9, Nesterov: true},
		{LR: 0.05, Momentum: 0.8, Dampening: 0.1},
	} {
		o, err := optim.NewSGD(cfg, n, optim.Alloc{Acct: mem.NewAccountant(0), Tier: mem.Device}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := randn(5, n, 1)
		cpuP := slices.Clone(p)
		m := &hostMem{}
		pa, buf := m.f32(p), m.zeros(device.F32, n)
		for step := range 3 {
			g := randn(uint64(20+step), n, 0.1)
			o.Step(cpuP, g)
			useBuf := 0
			if cfg.Momentum != 0 {
				useBuf = 1
			}
			launch(t, m, "sgd_f32", 2, 128, pa, m.f32(g), buf, 0, n, 0,
				b2i(cfg.WeightDecay != 0), useBuf, b2i(cfg.Nesterov), b2i(step == 0),
				float32(cfg.WeightDecay), float32(cfg.Momentum), float32(1-cfg.Dampening), float32(-cfg.LR))
			if d := cmp.Diff(f32bits(cpuP), f32bits(m.read(t, device.F32, pa, n))); d != "" {
				t.Fatalf("%+v step %d (-cpu +ref):\n%s", cfg, step, d)
			}
		}
	}
}

// TestReduceNMatchesComm checks reduce_n against package comm's Reduce,
// the contract it implements, for every op and dtype.
func TestReduceNMatchesComm(t *testing.T) {
	const n = 333
	for _, dt := range all3 {
		for _, nsrc := range []int{1, 2, 3, 5} {
			for op := range 3 {
				m := &hostMem{}
				var addrs []uint64
				var srcs []comm.Buffer
				for k := range nsrc {
					x := randn(uint64(100*k+op), n, 3)
					x[k] = float32(math.NaN())
					x[k+10] = float32(math.Inf(1 - 2*(k%2)))
					addrs = append(addrs, m.tensor(dt, x))
					if dt == device.F32 {
						srcs = append(srcs, comm.F32(x))
					} else if dt == device.BF16 {
						srcs = append(srcs, comm.BF16(bits(dt, x)))
					} else {
						srcs = append(srcs, comm.F16(bits(dt, x)))
					}
				}
				dst := m.zeros(dt, n)
				launch(t, m, NewTable().Name("reduce_n", dt), 2, 32, dst, m.u64(addrs), nsrc, n, op)
				var want comm.Buffer
				switch dt {
				case device.F32:
					want = comm.F32(make([]float32, n))
				case device.BF16:
					want = comm.BF16(make([]uint16, n))
				default:
					want = comm.F16(make([]uint16, n))
				}
				comm.Reduce([]comm.Buffer{want}, srcs, comm.Op(op))
				var got, exp []uint32
				if dt == device.F32 {
					got, exp = f32bits(m.read(t, dt, dst, n)), f32bits(want.F32())
				} else {
					got, exp = u16s(m.readBits(t, dst, n)), u16s(want.Bits())
				}
				if d := cmp.Diff(exp, got); d != "" {
					t.Fatalf("%v nsrc %d op %v (-comm +ref):\n%s", dt, nsrc, comm.Op(op), d)
				}
			}
		}
	}
}

// TestCastsMatchHalf: the casts are package half's conversions, NaNs,
// infinities, subnormals and overflow included.
func TestCastsMatchHalf(t *testing.T) {
	x := append(randn(7, 200, 1e-5), randn(8, 200, 7e4)...)
	x = append(x, 0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(-1)), 65519.99, 65520, 6e-8, 3e-8, 1e-45)
	n := len(x)
	for _, dt := range low16 {
		m := &hostMem{}
		src, dst := m.f32(x), m.zeros(dt, n)
		launch(t, m, NewTable().Name("cast_f32", dt), 1, 64, dst, src, n)
		if d := cmp.Diff(bits(dt, x), m.readBits(t, dst, n)); d != "" {
			t.Errorf("cast f32→%v (-half +ref):\n%s", dt, d)
		}
		back := m.zeros(device.F32, n)
		launch(t, m, NewTable().Name("cast_*_f32", dt), 1, 64, back, dst, n)
		want := make([]float32, n)
		for i, h := range bits(dt, x) {
			want[i] = widen(dt, h)
		}
		if d := cmp.Diff(f32bits(want), f32bits(m.read(t, device.F32, back, n))); d != "" {
			t.Errorf("cast %v→f32 (-half +ref):\n%s", dt, d)
		}
	}
}

func TestReduceSumOrder(t *testing.T) {
	const n = 10001
	x := randn(9, n, 1)
	m := &hostMem{}
	xa := m.f32(x)
	for _, shape := range [][2]int{{1, 1}, {3, 64}, {40, 256}, {400, 32}} {
		nb, B := shape[0], shape[1]
		partial := m.zeros(device.F32, 2*nb) // nb float64s
		out := m.zeros(device.F32, 2)
		launch(t, m, "reduce_sum_f32", nb, B, partial, xa, n, 1)
		launch(t, m, "sum_f64", 1, 128, out, partial, nb)
		var want float64
		for _, v := range x {
			want += float64(v) * float64(v)
		}
		got := m.readF64(t, out, 1)[0]
		if math.Abs(got-want) > 1e-12*want {
			t.Errorf("grid %d×%d: Σx² = %v, want %v", nb, B, got, want)
		}
	}
	// A single thread folds sequentially: exactly the plain loop.
	partial, out := m.zeros(device.F32, 2), m.zeros(device.F32, 2)
	launch(t, m, "reduce_sum_f32", 1, 1, partial, xa, n, 0)
	launch(t, m, "sum_f64", 1, 1, out, partial, 1)
	var want float64
	for _, v := range x {
		want += float64(v)
	}
	if got := m.readF64(t, out, 1)[0]; got != want {
		t.Errorf("one thread: Σx = %v, want %v", got, want)
	}
}

func TestAllFinite(t *testing.T) {
	for _, dt := range all3 {
		for _, bad := range []float32{0, float32(math.NaN()), float32(math.Inf(-1))} {
			x := randn(1, 1000, 1)
			x[777] = bad
			if bad == 0 {
				x[777] = 1
			}
			m := &hostMem{}
			flag := m.zeros(device.F32, 1)
			launch(t, m, NewTable().Name("all_finite", dt), 4, 64, flag, m.tensor(dt, x), len(x))
			got := m.read(t, device.F32, flag, 1)[0]
			if want := bad != 0; (math.Float32bits(got) != 0) != want {
				t.Errorf("%v with %v: flag %#x", dt, bad, math.Float32bits(got))
			}
		}
	}
}

func TestBadPointerFaults(t *testing.T) {
	m := &hostMem{}
	x := m.f32(make([]float32, 10))
	err := tryLaunch(t, m, "scale_f32", dim(1), dim(32), x, 11, float32(2))
	if err == nil || !errorsIs(err, ErrFault) {
		t.Errorf("scale past the end = %v, want ErrFault", err)
	}
	err = tryLaunch(t, m, "reduce_sum_f32", dim(1), dim(48), x, x, 10, 0)
	if err == nil || !errorsIs(err, ErrBadLaunch) {
		t.Errorf("reduction with 48 threads = %v, want ErrBadLaunch", err)
	}
}

func ftoa(f float64) string {
	if f == 0 {
		return "0"
	}
	return "0.1"
}

func btoa(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func f32bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

func u16s(x []uint16) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = uint32(v)
	}
	return out
}
