package kernels

import (
	"math"
	"testing"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/google/go-cmp/cmp"
)

// The layer references against straightforward float64 formulas on the
// same (rounded) inputs, within a tolerance of the storage type: these
// check the math; the GPU tests then check the CUDA kernels against the
// references.

func TestLayerNormRef(t *testing.T) {
	const N, C = 7, 193
	for _, dt := range all3 {
		x := roundAll(dt, randn(1, N*C, 2))
		w, b := roundAll(dt, randn(2, C, 1)), roundAll(dt, randn(3, C, 1))
		dy := roundAll(dt, randn(4, N*C, 1))
		m := &hostMem{}
		xa, wa, ba, dya := m.tensor(dt, x), m.tensor(dt, w), m.tensor(dt, b), m.tensor(dt, dy)
		out, mean, rstd := m.zeros(dt, N*C), m.zeros(device.F32, N), m.zeros(device.F32, N)
		launch(t, m, NewTable().Name("layernorm_fwd", dt), N, 64, out, mean, rstd, xa, wa, ba, N, C, float32(1e-5))
		dx := m.zeros(dt, N*C)
		launch(t, m, NewTable().Name("layernorm_bwd", dt), 3, 32, dx, dya, xa, wa, mean, rstd, N, C)
		rpc := 3
		nk := (N + rpc - 1) / rpc
		partial := m.zeros(device.F32, 2*nk*2*C)
		grid := driver.Dim3{X: uint32((C + 31) / 32), Y: 2, Z: 1}
		if err := tryLaunch(t, m, NewTable().Name("layernorm_bwd_partial", dt), grid, dim(32), partial, dya, xa, mean, rstd, N, C, rpc); err != nil {
			t.Fatal(err)
		}
		dw, db := m.zeros(dt, C), m.zeros(dt, C)
		launch(t, m, NewTable().Name("colsum_finish", dt), 2, 64, dw, partial, nk, C, 2*C, 0)
		launch(t, m, NewTable().Name("colsum_finish", dt), 2, 64, db, partial+uint64(8*C), nk, C, 2*C, 0)

		wantY, wantDX := make([]float64, N*C), make([]float64, N*C)
		wantDW, wantDB := make([]float64, C), make([]float64, C)
		for r := range N {
			row := x[r*C : (r+1)*C]
			var mu, v float64
			for _, e := range row {
				mu += float64(e)
			}
			mu /= C
			for _, e := range row {
				v += (float64(e) - mu) * (float64(e) - mu)
			}
			v /= C
			rs := 1 / math.Sqrt(v+1e-5)
			var sdy, sdyx float64
			for i := range C {
				xh := (float64(row[i]) - mu) * rs
				wantY[r*C+i] = xh*float64(w[i]) + float64(b[i])
				g := float64(dy[r*C+i]) * float64(w[i])
				sdy += g
				sdyx += g * xh
				wantDW[i] += float64(dy[r*C+i]) * xh
				wantDB[i] += float64(dy[r*C+i])
			}
			for i := range C {
				xh := (float64(row[i]) - mu) * rs
				g := float64(dy[r*C+i]) * float64(w[i])
				wantDX[r*C+i] = rs * (g - sdy/C - xh*sdyx/C)
			}
		}
		tol := dtTol(dt)
		closeTo(t, dt.String()+" layernorm out", m.read(t, dt, out, N*C), wantY, 2*tol)
		closeTo(t, dt.String()+" layernorm dinp", m.read(t, dt, dx, N*C), wantDX, 4*tol+1e-5)
		closeTo(t, dt.String()+" layernorm dw", m.read(t, dt, dw, C), wantDW, 2*tol)
		closeTo(t, dt.String()+" layernorm db", m.read(t, dt, db, C), wantDB, 2*tol)
	}
}

func TestRMSNormRef(t *testing.T) {
	const N, C = 5, 130
	for _, dt := range all3 {
		x := roundAll(dt, randn(11, N*C, 2))
		w, dy := roundAll(dt, randn(12, C, 1)), roundAll(dt, randn(13, N*C, 1))
		m := &hostMem{}
		xa, wa, dya := m.tensor(dt, x), m.tensor(dt, w), m.tensor(dt, dy)
		out, rr := m.zeros(dt, N*C), m.zeros(device.F32, N)
		launch(t, m, NewTable().Name("rmsnorm_fwd", dt), 2, 32, out, rr, xa, wa, N, C, float32(1e-6))
		dx := m.zeros(dt, N*C)
		launch(t, m, NewTable().Name("rmsnorm_bwd", dt), 2, 64, dx, dya, xa, wa, rr, N, C)
		partial := m.zeros(device.F32, 2*2*C)
		if err := tryLaunch(t, m, NewTable().Name("rmsnorm_bwd_partial", dt), driver.Dim3{X: 5, Y: 1, Z: 1}, dim(32), partial, dya, xa, rr, N, C, 4); err != nil {
			t.Fatal(err)
		}
		dw := m.zeros(dt, C)
		launch(t, m, NewTable().Name("colsum_finish", dt), 1, 32, dw, partial, 2, C, C, 0)
		wantY, wantDX, wantDW := make([]float64, N*C), make([]float64, N*C), make([]float64, C)
		for r := range N {
			var ss float64
			for i := range C {
				ss += float64(x[r*C+i]) * float64(x[r*C+i])
			}
			rs := 1 / math.Sqrt(ss/C+1e-6)
			var dot float64
			for i := range C {
				wantY[r*C+i] = float64(x[r*C+i]) * rs * float64(w[i])
				dot += float64(dy[r*C+i]) * float64(w[i]) * float64(x[r*C+i])
				wantDW[i] += float64(dy[r*C+i]) * float64(x[r*C+i]) * rs
			}
			for i := range C {
				wantDX[r*C+i] = rs*float64(dy[r*C+i])*float64(w[i]) - float64(x[r*C+i])*dot*rs*rs*rs/C
			}
		}
		tol := dtTol(dt)
		closeTo(t, dt.String()+" rmsnorm out", m.read(t, dt, out, N*C), wantY, 2*tol)
		closeTo(t, dt.String()+" rmsnorm dinp", m.read(t, dt, dx, N*C), wantDX, 4*tol+1e-5)
		closeTo(t, dt.String()+" rmsnorm dw", m.read(t, dt, dw, C), wantDW, 3*tol)
	}
}

func TestActivationRefs(t *testing.T) {
	const n = 2000
	for _, dt := range all3 {
		x, u, dy := roundAll(dt, randn(21, n, 3)), roundAll(dt, randn(22, n, 1)), roundAll(dt, randn(23, n, 1))
		m := &hostMem{}
		xa, ua, dya := m.tensor(dt, x), m.tensor(dt, u), m.tensor(dt, dy)
		g, dg := m.zeros(dt, n), m.zeros(dt, n)
		launch(t, m, NewTable().Name("gelu_fwd", dt), 3, 128, g, xa, n)
		launch(t, m, NewTable().Name("gelu_bwd", dt), 3, 128, dg, xa, dya, n)
		s, ds, du := m.zeros(dt, n), m.zeros(dt, n), m.zeros(dt, n)
		launch(t, m, NewTable().Name("swiglu_fwd", dt), 3, 128, s, xa, ua, n)
		launch(t, m, NewTable().Name("swiglu_bwd", dt), 3, 128, ds, du, xa, ua, dya, n)
		wg, wdg, ws, wds, wdu := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		const beta, kappa = 0.7978845608028654, 0.044715
		for i := range n {
			xi, ui, di := float64(x[i]), float64(u[i]), float64(dy[i])
			th := math.Tanh(beta * (xi + kappa*xi*xi*xi))
			wg[i] = 0.5 * xi * (1 + th)
			wdg[i] = di * (0.5*(1+th) + 0.5*xi*(1-th*th)*beta*(1+3*kappa*xi*xi))
			sig := 1 / (1 + math.Exp(-xi))
			ws[i] = xi * sig * ui
			wdu[i] = di * xi * sig
			wds[i] = di * ui * sig * (1 + xi*(1-sig))
		}
		tol := 3 * dtTol(dt)
		closeTo(t, dt.String()+" gelu", m.read(t, dt, g, n), wg, tol)
		closeTo(t, dt.String()+" gelu bwd", m.read(t, dt, dg, n), wdg, tol)
		closeTo(t, dt.String()+" swiglu", m.read(t, dt, s, n), ws, tol)
		closeTo(t, dt.String()+" swiglu dgate", m.read(t, dt, ds, n), wds, tol)
		closeTo(t, dt.String()+" swiglu dup", m.read(t, dt, du, n), wdu, tol)
	}
}

func TestRopeRef(t *testing.T) {
	const B, T, H, D = 2, 5, 3, 8
	for _, inter := range []int{0, 1} {
		x := randn(31, B*T*H*D, 1)
		cosT, sinT := make([]float32, T*D/2), make([]float32, T*D/2)
		for p := range T {
			for j := range D / 2 {
				th := float64(p) * math.Pow(10000, -2*float64(j)/D)
				cosT[p*D/2+j], sinT[p*D/2+j] = float32(math.Cos(th)), float32(math.Sin(th))
			}
		}
		m := &hostMem{}
		xa, ca, sa := m.f32(x), m.f32(cosT), m.f32(sinT)
		y := m.zeros(device.F32, len(x))
		launch(t, m, "rope_f32", 2, 32, y, xa, ca, sa, B*T, T, H, D, inter, 0)
		got := m.read(t, device.F32, y, len(x))
		want := make([]float64, len(x))
		for row := range B * T {
			p := row % T
			for h := range H {
				base := (row*H + h) * D
				for j := range D / 2 {
					i1, i2 := base+j, base+j+D/2
					if inter == 1 {
						i1, i2 = base+2*j, base+2*j+1
					}
					th := float64(p) * math.Pow(10000, -2*float64(j)/D)
					want[i1] = float64(x[i1])*math.Cos(th) - float64(x[i2])*math.Sin(th)
					want[i2] = float64(x[i2])*math.Cos(th) + float64(x[i1])*math.Sin(th)
				}
			}
		}
		closeTo(t, "rope", got, want, 1e-6)
		// inverse undoes the rotation, in place
		launch(t, m, "rope_f32", 2, 32, y, y, ca, sa, B*T, T, H, D, inter, 1)
		back := make([]float64, len(x))
		for i, v := range x {
			back[i] = float64(v)
		}
		closeTo(t, "rope inverse", m.read(t, device.F32, y, len(x)), back, 1e-6)
	}
}

func TestSoftmaxCausalRef(t *testing.T) {
	const BH, T = 3, 37
	scale := float32(0.125)
	pre := randn(41, BH*T*T, 4)
	datt := randn(42, BH*T*T, 1)
	m := &hostMem{}
	pa, da := m.f32(pre), m.f32(datt)
	att, dpre := m.zeros(device.F32, BH*T*T), m.zeros(device.F32, BH*T*T)
	launch(t, m, "softmax_causal_fwd_f32", 5, 16, att, pa, BH, T, scale)
	launch(t, m, "softmax_causal_bwd_f32", 5, 16, dpre, da, att, BH, T, scale)
	wantA, wantD := make([]float64, BH*T*T), make([]float64, BH*T*T)
	for r := range BH * T {
		tt, o := r%T, r*T
		mx := math.Inf(-1)
		for j := 0; j <= tt; j++ {
			mx = math.Max(mx, float64(scale)*float64(pre[o+j]))
		}
		var s float64
		for j := 0; j <= tt; j++ {
			s += math.Exp(float64(scale)*float64(pre[o+j]) - mx)
		}
		var dot float64
		for j := 0; j <= tt; j++ {
			wantA[o+j] = math.Exp(float64(scale)*float64(pre[o+j])-mx) / s
			dot += wantA[o+j] * float64(datt[o+j])
		}
		for j := 0; j <= tt; j++ {
			wantD[o+j] = float64(scale) * wantA[o+j] * (float64(datt[o+j]) - dot)
		}
	}
	closeTo(t, "softmax", m.read(t, device.F32, att, BH*T*T), wantA, 1e-6)
	closeTo(t, "softmax bwd", m.read(t, device.F32, dpre, BH*T*T), wantD, 1e-5)
}

func TestXentRef(t *testing.T) {
	const N, V, Vp = 6, 50, 56
	for _, dt := range all3 {
		logits := roundAll(dt, randn(51, N*Vp, 3))
		targets := []int32{3, -100, 49, 0, 17, 3}
		dloss := float32(1.0 / 5)
		m := &hostMem{}
		la, ta := m.tensor(dt, logits), m.i32(targets)
		losses := m.zeros(device.F32, N)
		launch(t, m, NewTable().Name("xent_fwd_bwd", dt), 4, 16, la, losses, la, ta, N, V, Vp, dloss, -100) // in place
		wantL, wantD := make([]float64, N), make([]float64, N*Vp)
		for r := range N {
			if targets[r] == -100 {
				continue
			}
			row := logits[r*Vp : r*Vp+V]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			lse := mx + math.Log(s)
			wantL[r] = lse - float64(row[targets[r]])
			for j, v := range row {
				wantD[r*Vp+j] = math.Exp(float64(v)-lse) * float64(dloss)
			}
			wantD[r*Vp+int(targets[r])] -= float64(dloss)
		}
		closeTo(t, dt.String()+" losses", m.read(t, device.F32, losses, N), wantL, 1e-5)
		closeTo(t, dt.String()+" dlogits", m.read(t, dt, la, N*Vp), wantD, 2*dtTol(dt))
	}
}

func TestEmbeddingRefs(t *testing.T) {
	const B, T, C, V = 2, 6, 5, 9
	tokens := []int32{3, 1, 3, 8, 0, 3, 1, 1, 7, 3, 2, 0}
	for _, dt := range all3 {
		wte, wpe := roundAll(dt, randn(61, V*C, 1)), roundAll(dt, randn(62, T*C, 1))
		dout := roundAll(dt, randn(63, B*T*C, 1))
		m := &hostMem{}
		wa, pa, ta := m.tensor(dt, wte), m.tensor(dt, wpe), m.i32(tokens)
		out, bad := m.zeros(dt, B*T*C), m.zeros(device.F32, 1)
		launch(t, m, NewTable().Name("embedding_fwd", dt), 2, 32, out, ta, wa, pa, B*T, T, C, V, bad)
		want := make([]float64, B*T*C)
		for r, tok := range tokens {
			for c := range C {
				want[r*C+c] = float64(wte[int(tok)*C+c]) + float64(wpe[(r%T)*C+c])
			}
		}
		closeTo(t, "embedding", m.read(t, dt, out, B*T*C), want, dtTol(dt))
		if m.read(t, device.F32, bad, 1)[0] != 0 {
			t.Error("bad flag set for valid tokens")
		}

		order, starts, uniq := TokenBuckets(tokens)
		dwte, dwpe := m.tensor(dt, wte), m.tensor(dt, wpe) // accumulate onto something
		grid := driver.Dim3{X: 1, Y: uint32(len(uniq)), Z: 1}
		if err := tryLaunch(t, m, NewTable().Name("embedding_bwd_tok", dt), grid, dim(32), dwte, m.tensor(dt, dout),
			m.i32(order), m.i32(starts), m.i32(uniq), len(uniq), C); err != nil {
			t.Fatal(err)
		}
		launch(t, m, NewTable().Name("embedding_bwd_pos", dt), 1, 32, dwpe, m.tensor(dt, dout), B, T, C)
		wantTE, wantPE := make([]float64, V*C), make([]float64, T*C)
		for i := range wantTE {
			wantTE[i] = float64(wte[i])
		}
		for i := range wantPE {
			wantPE[i] = float64(wpe[i])
		}
		for r, tok := range tokens {
			for c := range C {
				wantTE[int(tok)*C+c] += float64(dout[r*C+c])
				wantPE[(r%T)*C+c] += float64(dout[r*C+c])
			}
		}
		closeTo(t, dt.String()+" dwte", m.read(t, dt, dwte, V*C), wantTE, 4*dtTol(dt))
		closeTo(t, dt.String()+" dwpe", m.read(t, dt, dwpe, T*C), wantPE, 2*dtTol(dt))
	}
	// An out-of-range token zeroes its row and raises the flag.
	m := &hostMem{}
	out, bad := m.zeros(device.F32, 2*3), m.zeros(device.F32, 1)
	launch(t, m, "embedding_fwd_f32", 1, 32, out, m.i32([]int32{1, 4}), m.f32(make([]float32, 4*3)), 0, 2, 2, 3, 4, bad)
	if math.Float32bits(m.read(t, device.F32, bad, 1)[0]) != 1 {
		t.Error("token 4 of a 4-token vocabulary did not set the flag")
	}
}

func TestTokenBuckets(t *testing.T) {
	order, starts, uniq := TokenBuckets([]int32{5, 2, 5, 9, 2, 5})
	if d := cmp.Diff([]int32{1, 4, 0, 2, 5, 3}, order); d != "" {
		t.Errorf("order: %s", d)
	}
	if d := cmp.Diff([]int32{0, 2, 5, 6}, starts); d != "" {
		t.Errorf("starts: %s", d)
	}
	if d := cmp.Diff([]int32{2, 5, 9}, uniq); d != "" {
		t.Errorf("uniq: %s", d)
	}
}

func TestDataMovementRefs(t *testing.T) {
	const B, T, NH, NKV, HD = 2, 3, 4, 2, 5
	W := (NH + 2*NKV) * HD
	for _, dt := range all3 {
		x := roundAll(dt, randn(71, B*T*W, 1))
		m := &hostMem{}
		xa := m.tensor(dt, x)
		q, k, v := m.zeros(dt, B*NH*T*HD), m.zeros(dt, B*NKV*T*HD), m.zeros(dt, B*NKV*T*HD)
		launch(t, m, NewTable().Name("qkv_split", dt), 2, 32, q, k, v, xa, B, T, NH, NKV, HD)
		gq, gk := m.read(t, dt, q, B*NH*T*HD), m.read(t, dt, k, B*NKV*T*HD)
		for b := range B {
			for h := range NH {
				for tt := range T {
					for d := range HD {
						if got, want := gq[((b*NH+h)*T+tt)*HD+d], x[(b*T+tt)*W+h*HD+d]; got != want {
							t.Fatalf("%v q[%d,%d,%d,%d] = %v, want %v", dt, b, h, tt, d, got, want)
						}
					}
				}
			}
			for h := range NKV {
				for tt := range T {
					for d := range HD {
						if got, want := gk[((b*NKV+h)*T+tt)*HD+d], x[(b*T+tt)*W+(NH+h)*HD+d]; got != want {
							t.Fatalf("%v k[%d,%d,%d,%d] = %v, want %v", dt, b, h, tt, d, got, want)
						}
					}
				}
			}
		}
		back := m.zeros(dt, B*T*W)
		launch(t, m, NewTable().Name("qkv_merge", dt), 2, 32, back, q, k, v, B, T, NH, NKV, HD)
		if d := cmp.Diff(x, m.read(t, dt, back, B*T*W)); d != "" {
			t.Fatalf("%v qkv_merge(qkv_split(x)) != x:\n%s", dt, d)
		}

		// permute_0213 twice is the identity; once it moves [a][b][c][d] to [a][c][b][d].
		p := m.zeros(dt, B*T*W)
		launch(t, m, NewTable().Name("permute_0213", dt), 3, 32, p, xa, B, T, W/HD, HD)
		gp := m.read(t, dt, p, B*T*W)
		if got, want := gp[((1*(W/HD)+2)*T+1)*HD+3], x[((1*T+1)*(W/HD)+2)*HD+3]; got != want {
			t.Fatalf("permute: %v, want %v", got, want)
		}
		pp := m.zeros(dt, B*T*W)
		launch(t, m, NewTable().Name("permute_0213", dt), 3, 32, pp, p, B, W/HD, T, HD)
		if d := cmp.Diff(x, m.read(t, dt, pp, B*T*W)); d != "" {
			t.Fatalf("%v permute twice:\n%s", dt, d)
		}

		// repeat_kv then its backward sums the rep copies: 2x for rep 2.
		rep := NH / NKV
		kr := m.zeros(dt, B*NH*T*HD)
		launch(t, m, NewTable().Name("repeat_kv", dt), 2, 32, kr, k, B, NKV, rep, T*HD)
		dk := m.zeros(dt, B*NKV*T*HD)
		launch(t, m, NewTable().Name("repeat_kv_bwd", dt), 2, 32, dk, kr, B, NKV, rep, T*HD)
		want := make([]float64, len(gk))
		for i, e := range gk {
			want[i] = 2 * float64(e)
		}
		closeTo(t, "repeat_kv_bwd(repeat_kv(k))", m.read(t, dt, dk, len(gk)), want, 0)
	}
}

func TestBiasGradRef(t *testing.T) {
	const N, OC = 37, 11
	for _, dt := range all3 {
		dout := roundAll(dt, randn(81, N*OC, 1))
		m := &hostMem{}
		rpc := 8
		nk := (N + rpc - 1) / rpc
		partial := m.zeros(device.F32, 2*nk*OC)
		if err := tryLaunch(t, m, NewTable().Name("bias_grad_partial", dt), driver.Dim3{X: 1, Y: 3, Z: 1}, dim(16), partial, m.tensor(dt, dout), N, OC, rpc); err != nil {
			t.Fatal(err)
		}
		db := m.tensor(dt, make([]float32, OC))
		launch(t, m, NewTable().Name("colsum_finish", dt), 1, 16, db, partial, nk, OC, OC, 1)
		want := make([]float64, OC)
		for r := range N {
			for c := range OC {
				want[c] += float64(dout[r*OC+c])
			}
		}
		closeTo(t, dt.String()+" bias grad", m.read(t, dt, db, OC), want, dtTol(dt))
	}
}
