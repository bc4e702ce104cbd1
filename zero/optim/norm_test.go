package optim

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNormsAndSumsMatchTorchBitForBit(t *testing.T) {
	g := &loadGolden(t).Norms
	var norms []float32
	for i, n := range g.Sizes {
		x := f32s(g.X[i])
		if got, want := Norm2F32(x), float32(g.NormF32[i]); got != want {
			t.Errorf("Norm2F32(len %d) = %v, torch %v", n, got, want)
		}
		if got, want := Norm2F64(x), g.NormF64[i]; got != want {
			t.Errorf("Norm2F64(len %d) = %v, torch %v", n, got, want)
		}
		if got, want := SumF32(x), float32(g.SumF32[i]); got != want {
			t.Errorf("SumF32(len %d) = %v, torch %v", n, got, want)
		}
		sq := make([]float64, n)
		for j, v := range x {
			sq[j] = float64(v) * float64(v)
		}
		if got, want := SumF64(sq), g.SumSqF64[i]; got != want {
			t.Errorf("SumF64(len %d) = %v, torch %v", n, got, want)
		}
		norms = append(norms, Norm2F32(x))
	}
	scratch := make([]float32, len(norms))
	if got, want := SquaredSumF32(norms, scratch), float32(g.StackedSqSum); got != want {
		t.Errorf("stack(norms).square().sum() = %v, torch %v", got, want)
	}
	// DeepSpeed stage 0 with a data-parallel world of 2.
	total := DSStage0Norm(norms, scratch)
	if total != float32(g.DS0Total) {
		t.Errorf("DSStage0Norm = %v, torch %v", total, g.DS0Total)
	}
	share := DSStage0Share(total, 2)
	if avg := share + share; avg != float32(g.DS0AvgWorld2) {
		t.Errorf("averaged stage-0 norm = %v, torch %v", avg, g.DS0AvgWorld2)
	}
	if c := DSStage0Coef(share+share, 1.0); c != float32(g.DS0Coef) {
		t.Errorf("DSStage0Coef = %v, torch %v", c, g.DS0Coef)
	}
	// torch.nn.utils.clip_grad_norm_.
	tt := TorchTotalNorm(norms)
	if tt != float32(g.TorchTotal) {
		t.Errorf("TorchTotalNorm = %v, torch %v", tt, g.TorchTotal)
	}
	if c := TorchClipCoef(tt, 1.0); c != float32(g.TorchCoef1) {
		t.Errorf("TorchClipCoef(max 1) = %v, torch %v", c, g.TorchCoef1)
	}
	if c := TorchClipCoef(tt, 0.5); c != float32(g.TorchCoef05) {
		t.Errorf("TorchClipCoef(max 0.5) = %v, torch %v", c, g.TorchCoef05)
	}
	// ZeRO-1/2: float64 fragment norms, one group, loss scale 1, clip 1.
	n64 := make([]float64, len(g.Sizes))
	for i := range g.Sizes {
		n64[i] = Norm2F64(f32s(g.X[i]))
	}
	sumSq := Zero12LocalSumSq(n64, make([]float64, len(n64)))
	if sumSq != float32(g.Zero12Sq) {
		t.Errorf("Zero12LocalSumSq = %v, torch %v", sumSq, g.Zero12Sq)
	}
	zn := ZeroNorm(sumSq)
	if zn != float32(g.Zero12Total) {
		t.Errorf("ZeroNorm = %v, torch %v", zn, g.Zero12Total)
	}
	gn := ZeroGlobalNorm([]float32{zn})
	if gn != float32(g.Zero12Global) {
		t.Errorf("ZeroGlobalNorm = %v, torch %v", gn, g.Zero12Global)
	}
	if f := ZeroUnscaleFactor(gn, 1, 1); f != float32(g.Zero12Inv) {
		t.Errorf("ZeroUnscaleFactor = %v, torch %v", f, g.Zero12Inv)
	}
}

// Independent float64 references for the clip formulas.
func TestClipFormulas(t *testing.T) {
	for _, tc := range []struct {
		total, max float64
		want       float64
	}{
		{0.5, 1, 1}, {2, 1, 1 / (2 + 1e-6)}, {10, 0.5, 0.5 / (10 + 1e-6)}, {0, 1, 1},
	} {
		if got := ClipCoef(tc.total, tc.max); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("ClipCoef(%v, %v) = %v, want %v", tc.total, tc.max, got, tc.want)
		}
		f32 := []float64{
			float64(DSStage0Coef(float32(tc.total), tc.max)),
			float64(TorchClipCoef(float32(tc.total), tc.max)),
		}
		if d := cmp.Diff([]float64{tc.want, tc.want}, f32, cmpopts.EquateApprox(1e-6, 0)); d != "" {
			t.Errorf("float32 coefficients for total %v max %v (-want +got):\n%s", tc.total, tc.max, d)
		}
	}
	// ZeRO's factor folds the loss scale in: with scale 1024 and a true norm
	// of 4 (scaled 4096) and clip 1, grads are divided by 4*1024.
	if f, want := ZeroUnscaleFactor(4096, 1024, 1), 1/((4+1e-6)*1024); math.Abs(float64(f)-want) > 1e-6*want {
		t.Errorf("ZeroUnscaleFactor = %v, want %v", f, want)
	}
	if f := ZeroUnscaleFactor(100, 1024, 1); f != 1.0/1024 {
		t.Errorf("no clipping below the threshold: %v, want 1/1024", f)
	}
	if f := ZeroUnscaleFactor(-1, 8, 1); f != 1.0/8 {
		t.Errorf("overflow norm -1 must not clip: %v", f)
	}
	if f := Zero3UnscaleFactor(3, 1, 1); math.Abs(float64(f)-1/(3+1e-6)) > 1e-7 {
		t.Errorf("Zero3UnscaleFactor = %v", f)
	}
	if ZeroNorm(float32(math.Inf(1))) != -1 || Zero3Norm(math.NaN()) != -1 {
		t.Error("non-finite norms must read -1")
	}
}

// The DeepSpeed 0.14.5 reference runs (gradient_clipping 1.0) record the
// global norm of every step. Stage 0/1/2 and the plain baselines compute it
// in float32 (the recorded values are float32); non-offloaded stage 3 keeps
// it in float64, as Zero3Norm does. Step 8 of the GPT runs has a norm above
// 1, so every path clips there: the coefficients follow the formulas.
func TestReferenceGradNorms(t *testing.T) {
	root := "../../conformance/testdata/deepspeed-0.14.5-cpu" // the reference runs' results, as the conformance cases carry them
	files, _ := filepath.Glob(filepath.Join(root, "*", "*", "result.json"))
	if len(files) == 0 {
		t.Fatalf("no reference results under %s", root)
	}
	clipped := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Steps []struct {
				GradNorm *float64 `json:"grad_norm"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		run := filepath.Base(filepath.Dir(f))
		float64Norms := 0
		for i, s := range r.Steps {
			if s.GradNorm == nil {
				continue
			}
			gn := *s.GradNorm
			if float64(float32(gn)) != gn {
				float64Norms++
			}
			if gn <= 1 {
				if DSStage0Coef(float32(gn), 1) != 1 || TorchClipCoef(float32(gn), 1) != 1 ||
					ZeroUnscaleFactor(float32(gn), 1, 1) != 1 || Zero3UnscaleFactor(gn, 1, 1) != 1 {
					t.Errorf("%s step %d: norm %v ≤ 1 must not clip", run, i+1, gn)
				}
				continue
			}
			clipped++
			want := 1 / (gn + 1e-6)
			got := []float64{float64(DSStage0Coef(float32(gn), 1)), float64(TorchClipCoef(float32(gn), 1)),
				float64(ZeroUnscaleFactor(float32(gn), 1, 1)), float64(Zero3UnscaleFactor(gn, 1, 1))}
			if d := cmp.Diff([]float64{want, want, want, want}, got, cmpopts.EquateApprox(1.2e-7, 0)); d != "" {
				t.Errorf("%s step %d: coefficients for norm %v (-want +got):\n%s", run, i+1, gn, d)
			}
		}
		stage3 := run == "z3_fp32" || run == "z3_bf16"
		if stage3 && float64Norms == 0 {
			t.Errorf("%s: expected float64 norms from stage 3", run)
		}
		if !strings.Contains(run, "z3_") && float64Norms > 0 {
			t.Errorf("%s: %d norms are not float32", run, float64Norms)
		}
	}
	if clipped == 0 {
		t.Error("no reference step was clipped; the test lost its subject")
	}
}

func TestScaleIsElementwise(t *testing.T) {
	pool := NewPool(3)
	defer pool.Close()
	x := make([]float32, 10000)
	for i := range x {
		x[i] = float32(i)
	}
	pool.Scale(x, 0.5)
	for i, v := range x {
		if v != float32(i)*0.5 {
			t.Fatalf("x[%d] = %v", i, v)
		}
	}
}

// Pool.Scale and Pool.Divide give every element the bits of the scalar
// float32 product or quotient, on lengths that end inside and after the
// vector blocks, for values of every class and divisors that are and are
// not powers of two.
func TestElementwiseMatchesScalarBitForBit(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 100, vecBlock - 1, vecBlock + 13, 3*vecBlock + 5} {
		for _, c := range []float32{4, 3, 0.1, 1e-40, 0, float32(math.Inf(-1))} {
			x := make([]float32, n)
			for i := range x {
				switch rng.IntN(20) {
				case 0:
					x[i] = math.Float32frombits(rng.Uint32()) // any class, NaNs included
				case 1:
					x[i] = math.Float32frombits(rng.Uint32N(1 << 23)) // subnormal
				default:
					x[i] = float32(rng.NormFloat64())
				}
			}
			for _, op := range []struct {
				name string
				run  func([]float32)
				want func(float32) float32
			}{
				{"Scale", func(y []float32) { pool.Scale(y, c) }, func(v float32) float32 { return v * c }},
				{"Divide", func(y []float32) { pool.Divide(y, c) }, func(v float32) float32 { return v / c }},
			} {
				y := append([]float32(nil), x...)
				op.run(y)
				for i, v := range x {
					w := op.want(v)
					if math.Float32bits(y[i]) != math.Float32bits(w) && !(y[i] != y[i] && w != w) {
						t.Fatalf("%s n=%d c=%v: element %d (%v) gives %v, the scalar operation %v", op.name, n, c, i, v, y[i], w)
					}
				}
			}
		}
	}
}

// scalarLanes is the lane loop of sumSquaresFinish on its own: the 8
// accumulators after every full group of 8 elements of x.
func scalarLanes(x []float32) (acc [8]float32) {
	for d := 0; d+8 <= len(x); d += 8 {
		for j := range acc {
			acc[j] = fma32(x[d+j], x[d+j], acc[j])
		}
	}
	return acc
}

// laneTies counts the lane steps of x whose exact sum lies on a float32
// rounding midpoint of the normal range (a tie, which round-to-nearest-even
// decides, and fma32's slow path), to show that a test case reaches them.
func laneTies(x []float32) int {
	var acc [8]float32
	ties := 0
	for d := 0; d+8 <= len(x); d += 8 {
		for j := range acc {
			s := fmaD(x[d+j], x[d+j], acc[j])
			if bits := math.Float64bits(s); bits&(1<<29-1) == 1<<28 && bits&(0x7FF<<52) >= 0x381<<52 {
				ties++
			}
			acc[j] = fma32(x[d+j], x[d+j], acc[j])
		}
	}
	return ties
}

// The assembly lane loop gives SumSquaresF32 the bits of the scalar code,
// and its 8 lanes the bits of the scalar lanes, on lengths 0..100 at
// several misalignments, on lengths around one, two and three assembly
// blocks (the lanes cross calls through memory) and on one long ragged
// length, for values from every float32 class.
//
// Double rounding, the other trap of fma32, does not occur here: a search
// over every odd 24-bit significand of x and every alignment of x*x to an
// accumulator acc ≥ 0 finds no sum that float64 rounds onto a float32
// midpoint the exact sum is not on (x*x would need 29 zero or one bits
// right after its half-ulp bit). The "ties" case aims at exact midpoints
// instead, which round to even.
//
// NaNs must match too, payload and sign: where a NaN square meets a NaN
// accumulator both paths keep the square's NaN (VFMADD231PS by its operand
// priority, fma32 by the operand order of its float64 add), so no case
// needs the looser "both NaN" of the Adam kernel tests.
func TestSumSquaresVectorMatchesScalarBitForBit(t *testing.T) {
	if !haveAVX2FMA {
		t.Skip("no AVX2+FMA kernel in this build or on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 14))
	pow2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	sign := func() float32 { return float32(1 - 2*r.IntN(2)) }
	for _, tc := range []struct {
		name string
		next func() float32
		ties bool // must reach float32 midpoints
	}{
		{name: "training", next: func() float32 { return sign() * float32(math.Ldexp(r.Float64(), -r.IntN(30))) }},
		{name: "classes", next: f32gen{r: r}.next},
		{name: "classes-nan", next: f32gen{r: r, nan: true}.next},
		{name: "zeros", next: func() float32 {
			if r.IntN(16) == 0 {
				return sign() * math.Float32frombits(1+r.Uint32N(1<<23-1))
			}
			return sign() * 0
		}},
		// Squares that are subnormal, or underflow to zero, and sums that
		// cross into the normal range.
		{name: "subnormal", next: func() float32 {
			return sign() * float32(math.Ldexp(1+r.Float64(), -64-r.IntN(12)))
		}},
		// Powers of two and their neighbours, squares spanning 25
		// binades: sums of 24 significant bits plus an exact half ulp.
		{name: "ties", ties: true, next: func() float32 {
			x := pow2(-r.IntN(13))
			switch r.IntN(4) {
			case 0:
				x *= 1 + pow2(-23)
			case 1:
				x *= 1 - pow2(-24)
			}
			return sign() * x
		}},
		// Sums that overflow to +Inf, and Inf inputs.
		{name: "overflow", next: func() float32 {
			if r.IntN(50) == 0 {
				return sign() * float32(math.Inf(1))
			}
			return sign() * float32(math.Ldexp(1+r.Float64(), 50+r.IntN(15)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lens []int
			for n := 0; n <= 100; n++ {
				lens = append(lens, n)
			}
			blocks := 3
			if testing.Short() {
				blocks = 1
			}
			for b := 1; b <= blocks; b++ {
				for d := -9; d <= 9; d++ {
					lens = append(lens, b*vecBlock+d)
				}
			}
			lens = append(lens, (blocks+1)*vecBlock+8*r.IntN(vecBlock/8)+5)
			const maxOff = 3
			buf := make([]float32, lens[len(lens)-1]+maxOff)
			ties := 0
			for _, n := range lens {
				off := n % (maxOff + 1) // the start's alignment varies with n
				x := buf[off : off+n]
				for i := range x {
					x[i] = tc.next()
				}
				var vacc [8]float32
				d := sumSquaresVector(&vacc, x)
				if want := len(x) &^ 7; d != want {
					t.Fatalf("len %d: vector lanes stop at %d, want %d", n, d, want)
				}
				sacc := scalarLanes(x)
				for j := range vacc {
					if math.Float32bits(vacc[j]) != math.Float32bits(sacc[j]) {
						t.Fatalf("len %d: lane %d: vector %#08x (%g), scalar %#08x (%g)",
							n, j, math.Float32bits(vacc[j]), vacc[j], math.Float32bits(sacc[j]), sacc[j])
					}
				}
				got, want := SumSquaresF32(x), sumSquaresScalar(x)
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("len %d: SumSquaresF32 %#08x (%g), scalar %#08x (%g)",
						n, math.Float32bits(got), got, math.Float32bits(want), want)
				}
				ties += laneTies(x)
			}
			if tc.ties && ties == 0 {
				t.Error("no lane step met a float32 midpoint; the case lost its subject")
			}
			t.Logf("%d lengths, %d lane ties", len(lens), ties)
		})
	}
}
