package cuda

import (
	"math"

	"github.com/dszero/dszero/cuda/kernels"
	"github.com/dszero/dszero/device"
)

func caseLayerNorm(h *harness, dt device.DType) []output {
	const N, C = 300, 768
	x := rounded(dt, randn(60, N*C, 2))
	w, b, dy := rounded(dt, randn(61, C, 1)), rounded(dt, randn(62, C, 0.1)), rounded(dt, randn(63, N*C, 1))
	dw0 := rounded(dt, randn(64, C, 0.5))
	mx, mw, mb, mdy := h.in(dt, x), h.in(dt, w), h.in(dt, b), h.in(dt, dy)
	out, mean, rstd, dx, dw, db := h.zeros(dt, N*C), h.zeros(device.F32, N), h.zeros(device.F32, N), h.zeros(dt, N*C), h.in(dt, dw0), h.zeros(dt, C)
	scratch := h.zeros(dt, C)
	h.do(func(q *Issuer) error {
		if err := h.k.LayerNormFwd(q, h.s, dt, out, mean, rstd, mx, mw, mb, N, C, 1e-5); err != nil {
			return err
		}
		// dw accumulates onto dw0, db is written.
		if err := h.k.LayerNormBwd(q, h.s, dt, dx, dw, Mem{}, mdy, mx, mw, mean, rstd, N, C, true); err != nil {
			return err
		}
		return h.k.LayerNormBwd(q, h.s, dt, dx, scratch, db, mdy, mx, mw, mean, rstd, N, C, false)
	})
	wy, wdx, wdw, wdb, wmu := make([]float64, N*C), make([]float64, N*C), f64s(dw0), make([]float64, C), make([]float64, N)
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
		rs := 1 / math.Sqrt(v/C+1e-5)
		wmu[r] = mu
		var sg, sgx float64
		for i := range C {
			xh := (float64(row[i]) - mu) * rs
			wy[r*C+i] = xh*float64(w[i]) + float64(b[i])
			g := float64(dy[r*C+i]) * float64(w[i])
			sg += g
			sgx += g * xh
			wdw[i] += float64(dy[r*C+i]) * xh
			wdb[i] += float64(dy[r*C+i])
		}
		for i := range C {
			xh := (float64(row[i]) - mu) * rs
			wdx[r*C+i] = rs * (float64(dy[r*C+i])*float64(w[i]) - sg/C - xh*sgx/C)
		}
	}
	u := 2 * ulp(dt)
	return []output{{"out", dt, h.out(dt, out), wy, u + 1e-6}, {"mean", device.F32, h.out(device.F32, mean), wmu, 1e-6},
		{"dinp", dt, h.out(dt, dx), wdx, 2*u + 1e-5}, {"dw (accumulated)", dt, h.out(dt, dw), wdw, u + 1e-6},
		{"db", dt, h.out(dt, db), wdb, u + 1e-6}}
}

func caseRMSNorm(h *harness, dt device.DType) []output {
	const N, C = 200, 512
	x, w, dy := rounded(dt, randn(70, N*C, 2)), rounded(dt, randn(71, C, 1)), rounded(dt, randn(72, N*C, 1))
	mx, mw, mdy := h.in(dt, x), h.in(dt, w), h.in(dt, dy)
	out, rr, dx, dw := h.zeros(dt, N*C), h.zeros(device.F32, N), h.zeros(dt, N*C), h.zeros(dt, C)
	h.do(func(q *Issuer) error {
		if err := h.k.RMSNormFwd(q, h.s, dt, out, rr, mx, mw, N, C, 1e-6); err != nil {
			return err
		}
		return h.k.RMSNormBwd(q, h.s, dt, dx, dw, mdy, mx, mw, rr, N, C, false)
	})
	wy, wdx, wdw := make([]float64, N*C), make([]float64, N*C), make([]float64, C)
	for r := range N {
		var ss, dot float64
		for i := range C {
			ss += float64(x[r*C+i]) * float64(x[r*C+i])
		}
		rs := 1 / math.Sqrt(ss/C+1e-6)
		for i := range C {
			wy[r*C+i] = float64(x[r*C+i]) * rs * float64(w[i])
			dot += float64(dy[r*C+i]) * float64(w[i]) * float64(x[r*C+i])
			wdw[i] += float64(dy[r*C+i]) * float64(x[r*C+i]) * rs
		}
		for i := range C {
			wdx[r*C+i] = rs*float64(dy[r*C+i])*float64(w[i]) - float64(x[r*C+i])*dot*rs*rs*rs/C
		}
	}
	u := 2 * ulp(dt)
	return []output{{"out", dt, h.out(dt, out), wy, 2*u + 1e-6}, {"dinp", dt, h.out(dt, dx), wdx, 2*u + 1e-5}, {"dw", dt, h.out(dt, dw), wdw, 2*u + 1e-6}}
}

func caseActivations(h *harness, dt device.DType) []output {
	const n = 20000
	x, u, dy := rounded(dt, randn(80, n, 2)), rounded(dt, randn(81, n, 1)), rounded(dt, randn(82, n, 1))
	mx, mu, mdy := h.in(dt, x), h.in(dt, u), h.in(dt, dy)
	g, dg, s, dgate, dup := h.zeros(dt, n), h.in(dt, dy), h.zeros(dt, n), h.zeros(dt, n), h.zeros(dt, n)
	h.do(func(q *Issuer) error {
		if err := h.k.GeluFwd(q, h.s, dt, g, mx, n); err != nil {
			return err
		}
		if err := h.k.GeluBwd(q, h.s, dt, dg, mx, dg, n); err != nil { // in place on dout
			return err
		}
		if err := h.k.SwiGLUFwd(q, h.s, dt, s, mx, mu, n); err != nil {
			return err
		}
		return h.k.SwiGLUBwd(q, h.s, dt, dgate, dup, mx, mu, mdy, n)
	})
	const beta, kappa = 0.7978845608028654, 0.044715
	wg, wdg, ws, wdgate, wdup := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range n {
		xi, ui, di := float64(x[i]), float64(u[i]), float64(dy[i])
		th := math.Tanh(beta * (xi + kappa*xi*xi*xi))
		wg[i] = 0.5 * xi * (1 + th)
		wdg[i] = di * (0.5*(1+th) + 0.5*xi*(1-th*th)*beta*(1+3*kappa*xi*xi))
		sig := 1 / (1 + math.Exp(-xi))
		ws[i] = xi * sig * ui
		wdup[i] = di * xi * sig
		wdgate[i] = di * ui * sig * (1 + xi*(1-sig))
	}
	tol := 3*ulp(dt) + 1e-5 // float32 formulas with cancellation near gelu' = 0
	return []output{{"gelu", dt, h.out(dt, g), wg, tol}, {"gelu bwd", dt, h.out(dt, dg), wdg, tol},
		{"swiglu", dt, h.out(dt, s), ws, tol}, {"swiglu dgate", dt, h.out(dt, dgate), wdgate, tol}, {"swiglu dup", dt, h.out(dt, dup), wdup, tol}}
}

func caseRoPE(h *harness, dt device.DType) []output {
	const B, T, H, D = 2, 64, 4, 64
	x := rounded(dt, randn(90, B*T*H*D, 1))
	cosT, sinT := make([]float32, T*D/2), make([]float32, T*D/2)
	for p := range T {
		for j := range D / 2 {
			th := float64(p) * math.Pow(10000, -2*float64(j)/D)
			cosT[p*D/2+j], sinT[p*D/2+j] = float32(math.Cos(th)), float32(math.Sin(th))
		}
	}
	mx, mc, ms := h.in(dt, x), h.in(device.F32, cosT), h.in(device.F32, sinT)
	y, yi := h.zeros(dt, len(x)), h.zeros(dt, len(x))
	h.do(func(q *Issuer) error {
		if err := h.k.RoPE(q, h.s, dt, y, mx, mc, ms, B*T, T, H, D, false, false); err != nil {
			return err
		}
		return h.k.RoPE(q, h.s, dt, yi, mx, mc, ms, B*T, T, H, D, true, true)
	})
	want, wanti := make([]float64, len(x)), make([]float64, len(x))
	for row := range B * T {
		p := row % T
		for hh := range H {
			base := (row*H + hh) * D
			for j := range D / 2 {
				c, s := float64(cosT[p*D/2+j]), float64(sinT[p*D/2+j])
				x1, x2 := float64(x[base+j]), float64(x[base+j+D/2])
				want[base+j], want[base+j+D/2] = x1*c-x2*s, x2*c+x1*s
				x1, x2 = float64(x[base+2*j]), float64(x[base+2*j+1])
				wanti[base+2*j], wanti[base+2*j+1] = x1*c+x2*s, x2*c-x1*s
			}
		}
	}
	return []output{{"rope", dt, h.out(dt, y), want, ulp(dt) + 1e-6}, {"rope interleaved inverse", dt, h.out(dt, yi), wanti, ulp(dt) + 1e-6}}
}

func caseAttentionData(h *harness, dt device.DType) []output {
	const B, T, NH, NKV, HD = 2, 17, 6, 2, 16
	W := (NH + 2*NKV) * HD
	x := rounded(dt, randn(100, B*T*W, 1))
	mx := h.in(dt, x)
	q, k, v := h.zeros(dt, B*NH*T*HD), h.zeros(dt, B*NKV*T*HD), h.zeros(dt, B*NKV*T*HD)
	back, kr, dk, perm := h.zeros(dt, B*T*W), h.zeros(dt, B*NH*T*HD), h.zeros(dt, B*NKV*T*HD), h.zeros(dt, B*NH*T*HD)
	rep := NH / NKV
	h.do(func(qq *Issuer) error {
		if err := h.k.QKVSplit(qq, h.s, dt, q, k, v, mx, B, T, NH, NKV, HD); err != nil {
			return err
		}
		if err := h.k.QKVMerge(qq, h.s, dt, back, q, k, v, B, T, NH, NKV, HD); err != nil {
			return err
		}
		if err := h.k.RepeatKV(qq, h.s, dt, kr, k, B, NKV, rep, T*HD); err != nil {
			return err
		}
		if err := h.k.RepeatKVBwd(qq, h.s, dt, dk, kr, B, NKV, rep, T*HD); err != nil {
			return err
		}
		return h.k.Permute0213(qq, h.s, dt, perm, q, B, NH, T, HD) // (B,NH,T,HD) → (B,T,NH,HD)
	})
	wq, wk, wkr, wdk, wp := make([]float64, B*NH*T*HD), make([]float64, B*NKV*T*HD), make([]float64, B*NH*T*HD), make([]float64, B*NKV*T*HD), make([]float64, B*NH*T*HD)
	for b := range B {
		for t := range T {
			for hh := range NH {
				for d := range HD {
					e := float64(x[(b*T+t)*W+hh*HD+d])
					wq[((b*NH+hh)*T+t)*HD+d] = e
					wp[((b*T+t)*NH+hh)*HD+d] = e
				}
			}
			for hh := range NKV {
				for d := range HD {
					e := float64(x[(b*T+t)*W+(NH+hh)*HD+d])
					wk[((b*NKV+hh)*T+t)*HD+d] = e
					wdk[((b*NKV+hh)*T+t)*HD+d] = float64(roundTo(dt, float32(float64(rep)*e)))
					for r := range rep {
						wkr[((b*NH+hh*rep+r)*T+t)*HD+d] = e
					}
				}
			}
		}
	}
	return []output{{"q", dt, h.out(dt, q), wq, 0}, {"k", dt, h.out(dt, k), wk, 0}, {"merge", dt, h.out(dt, back), f64s(x), 0},
		{"repeat_kv", dt, h.out(dt, kr), wkr, 0}, {"repeat_kv_bwd", dt, h.out(dt, dk), wdk, 0}, {"permute", dt, h.out(dt, perm), wp, 0}}
}

func caseSoftmax(h *harness, dt device.DType) []output {
	const BH, T = 6, 129
	scale := float32(1 / math.Sqrt(64))
	pre, datt := rounded(dt, randn(110, BH*T*T, 3)), rounded(dt, randn(111, BH*T*T, 1))
	mp, md := h.in(dt, pre), h.in(dt, datt)
	att, dpre := h.zeros(dt, BH*T*T), h.zeros(dt, BH*T*T)
	h.do(func(q *Issuer) error {
		if err := h.k.SoftmaxCausalFwd(q, h.s, dt, att, mp, BH, T, scale); err != nil {
			return err
		}
		return h.k.SoftmaxCausalBwd(q, h.s, dt, dpre, md, att, BH, T, scale)
	})
	gotA := h.out(dt, att)
	wa, wd := make([]float64, BH*T*T), make([]float64, BH*T*T)
	for r := range BH * T {
		t, o := r%T, r*T
		mx := math.Inf(-1)
		for j := 0; j <= t; j++ {
			mx = math.Max(mx, float64(scale)*float64(pre[o+j]))
		}
		var s, dot float64
		for j := 0; j <= t; j++ {
			s += math.Exp(float64(scale)*float64(pre[o+j]) - mx)
		}
		for j := 0; j <= t; j++ {
			wa[o+j] = math.Exp(float64(scale)*float64(pre[o+j])-mx) / s
			dot += float64(gotA[o+j]) * float64(datt[o+j]) // backward from the stored weights
		}
		for j := 0; j <= t; j++ {
			wd[o+j] = float64(scale) * float64(gotA[o+j]) * (float64(datt[o+j]) - dot)
		}
	}
	return []output{{"att", dt, gotA, wa, 2*ulp(dt) + 1e-6}, {"dpre", dt, h.out(dt, dpre), wd, 2*ulp(dt) + 1e-5}}
}

func caseCrossEntropy(h *harness, dt device.DType) []output {
	const N, V, Vp = 64, 1000, 1024
	logits := rounded(dt, randn(120, N*Vp, 3))
	targets := make([]int32, N)
	for i := range targets {
		targets[i] = int32((i * 37) % V)
	}
	targets[5] = -100
	ml, mt := h.in(dt, logits), h.ints(targets)
	losses := h.zeros(device.F32, N)
	dloss := float32(1.0 / (N - 1))
	h.do(func(q *Issuer) error { return h.k.CrossEntropy(q, h.s, dt, ml, losses, ml, mt, N, V, Vp, dloss, -100) })
	wl, wd := make([]float64, N), make([]float64, N*Vp)
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
		wl[r] = lse - float64(row[targets[r]])
		for j, v := range row {
			wd[r*Vp+j] = math.Exp(float64(v)-lse) * float64(dloss)
		}
		wd[r*Vp+int(targets[r])] -= float64(dloss)
	}
	return []output{{"losses", device.F32, h.out(device.F32, losses), wl, 1e-5}, {"dlogits", dt, h.out(dt, ml), wd, 2 * ulp(dt)}}
}

func caseEmbedding(h *harness, dt device.DType) []output {
	const B, T, C, V = 4, 32, 96, 50
	tokens := make([]int32, B*T)
	for i := range tokens {
		tokens[i] = int32((i*i + 3*i) % V)
	}
	wte, wpe := rounded(dt, randn(130, V*C, 1)), rounded(dt, randn(131, T*C, 1))
	dout := rounded(dt, randn(132, B*T*C, 1))
	mt, mte, mpe, md := h.ints(tokens), h.in(dt, wte), h.in(dt, wpe), h.in(dt, dout)
	out, bad := h.zeros(dt, B*T*C), h.zeros(device.F32, 1)
	dwte, dwpe := h.in(dt, wte), h.in(dt, wpe) // accumulate onto the weights' values
	order, starts, uniq := kernels.TokenBuckets(tokens)
	tb := TokenBuckets{Order: h.ints(order), Starts: h.ints(starts), Uniq: h.ints(uniq), NUniq: len(uniq)}
	h.do(func(q *Issuer) error {
		if err := h.k.EmbeddingFwd(q, h.s, dt, out, mt, mte, mpe, bad, B*T, T, C, V); err != nil {
			return err
		}
		return h.k.EmbeddingBwd(q, h.s, dt, dwte, dwpe, md, tb, B, T, C)
	})
	wo, wte2, wpe2 := make([]float64, B*T*C), f64s(wte), f64s(wpe)
	for r, tok := range tokens {
		for c := range C {
			wo[r*C+c] = float64(wte[int(tok)*C+c]) + float64(wpe[(r%T)*C+c])
			wte2[int(tok)*C+c] += float64(dout[r*C+c])
			wpe2[(r%T)*C+c] += float64(dout[r*C+c])
		}
	}
	u := ulp(dt)
	return []output{{"out", dt, h.out(dt, out), wo, u}, {"bad", device.F32, h.out(device.F32, bad), []float64{0}, 0},
		{"dwte", dt, h.out(dt, dwte), wte2, 6 * u}, {"dwpe", dt, h.out(dt, dwpe), wpe2, 3 * u}}
}

// caseGemm checks row-major products of every transpose combination,
// padded leading dimensions, beta ≠ 0 and strided batches against a
// float64 product of the rounded inputs.
func caseGemm(h *harness, dt device.DType) []output {
	var outs []output
	shapes := []Gemm{
		{M: 64, N: 48, K: 80},
		{M: 33, N: 17, K: 129, TransB: true},
		{M: 20, N: 70, K: 31, TransA: true, LDA: 40},
		{M: 9, N: 11, K: 13, TransA: true, TransB: true, LDC: 16},
		{M: 32, N: 32, K: 16, Batch: 6, StrideA: 32 * 16, StrideB: 16 * 32, StrideC: 32 * 32},
		{M: 48, N: 24, K: 24, TransB: true, Batch: 3, StrideA: 48 * 24, StrideB: 24 * 24, StrideC: 48 * 24},
	}
	for si, g := range shapes {
		g.AType, g.BType, g.CType = dt, dt, dt
		gn := g.normalized()
		ar, ac := gn.M, gn.K
		if gn.TransA {
			ar, ac = gn.K, gn.M
		}
		br, bc := gn.K, gn.N
		if gn.TransB {
			br, bc = gn.N, gn.K
		}
		na, nb, nc := extent(ar, ac, gn.LDA, gn.Batch, gn.StrideA), extent(br, bc, gn.LDB, gn.Batch, gn.StrideB), extent(gn.M, gn.N, gn.LDC, gn.Batch, gn.StrideC)
		A, B, C := rounded(dt, randn(uint64(140+si), int(na), 1)), rounded(dt, randn(uint64(150+si), int(nb), 1)), rounded(dt, randn(uint64(160+si), int(nc), 1))
		ma, mb, mc := h.in(dt, A), h.in(dt, B), h.in(dt, C)
		alpha, beta := float32(0.5), float32(-1.25)
		h.do(func(q *Issuer) error { return q.Gemm(h.s, g, alpha, ma, mb, beta, mc) })
		want := f64s(C)
		for bt := range gn.Batch {
			for i := range gn.M {
				for j := range gn.N {
					var acc float64
					for p := range gn.K {
						var a, b float64
						if gn.TransA {
							a = float64(A[int64(bt)*gn.StrideA+int64(p*gn.LDA+i)])
						} else {
							a = float64(A[int64(bt)*gn.StrideA+int64(i*gn.LDA+p)])
						}
						if gn.TransB {
							b = float64(B[int64(bt)*gn.StrideB+int64(j*gn.LDB+p)])
						} else {
							b = float64(B[int64(bt)*gn.StrideB+int64(p*gn.LDB+j)])
						}
						acc += a * b
					}
					o := int64(bt)*gn.StrideC + int64(i*gn.LDC+j)
					want[o] = float64(alpha)*acc + float64(beta)*float64(C[o])
				}
			}
		}
		// Elements between rows (padding) must be untouched: want keeps C there.
		tol := 2*ulp(dt) + 1e-5
		outs = append(outs, output{"gemm" + string(rune('A'+si)), dt, h.out(dt, mc), want, tol})
	}
	return outs
}
