package gpt

import "math"

// The fast float32 path (Options.Fast), the default for users; the exact
// path stays for conformance. A step computes the same layers as the
// exact path, in float32, with these differences:
//
//   - attention is GEMMs through the Gemmer, blocked causally: for each
//     (b, h), the scores of rows [t0, t1) are computed against keys
//     [0, t1) only, and so are att·v and the backward's products (the
//     triangle the blocks leave above the diagonal is zero in att and
//     d(scores)); the exact path sums them in llm.c's loop order instead;
//   - exp and tanh (softmax, cross-entropy, GELU) are fastExp and fastTanh
//     (fastmath.go): float32, within 1 ulp, where the exact path calls
//     the float64 library functions;
//   - the bias of attn.proj and mlp.proj is added in the pass that adds
//     the residual, and mlp.fc's in the pass that applies the GELU (one
//     pass over each output instead of a bias copy and a second pass);
//     LayerNorm's input gradient is added into the residual stream's
//     gradient as it is computed, without the scratch the exact path
//     writes and reads back;
//   - LayerNorm, the GELU, the softmax and the column sums of bias and
//     LayerNorm parameter gradients run on the pool, row or column ranges
//     per worker; each element's sum keeps the exact path's order, so
//     those results do not change with the number of workers.
//
// Everything else (embedding, the Linear GEMMs, the float64 sums of
// LayerNorm and the loss) is the exact path's. Losses stay within 1e-5
// relative of the exact path over ten training steps
// (TestFastMatchesExact).
//
// With a 16-bit DType the fast path is the contract of a GPU's 16-bit
// kernels: read 16-bit values, compute in float32 (the GEMMs through the
// Gemmer), round each op's output once — the op list of doc.go's 16-bit
// emulation, the fused passes rounding each op they fuse (a Linear's
// output before the residual sum or the GELU, the LayerNorm input
// gradient before it joins the residual stream's). It replaces the
// exact path's torch 1.13 CPU bf16 kernels (bf16.go: bf16 LayerNorm
// moments and GELU, oneDNN's summation order in plain loops), which are
// 20–25× slower on GPT-2 small (BenchmarkGPTStep16); TestFast16Rounded checks that every output
// is rounded, TestFast16MatchesExact that ten steps stay within the
// conformance band of the exact path's losses.

// attnBlockDefault is the row block of the causal attention GEMMs: a
// block of rows computes the columns its last row needs.
const attnBlockDefault = 64

// fastJobs are the fast path's pool tasks (a dispatch allocates nothing).
type fastJobs struct {
	ln      lnJob
	lnBack  lnBackJob
	lnCols  lnColsJob
	cols    colSumJob
	bgelu   biasGeluJob
	bres    biasResJob
	softmax softmaxJob
	smBack  softmaxBackJob
}

// blockForwardFast is blockForward on the fast path.
func (m *Model) blockForwardFast(l int, x []float32, ba *blockActs, out []float32) {
	p := &m.p.blocks[l]
	B, T := m.a.B, m.a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	g := m.opt.Gemm
	m.layernormForwardFast(ba.ln1, ba.ln1Mean, ba.ln1Rstd, x, p.ln1w, p.ln1b, N)
	m.matmulForward(ba.qkv, ba.ln1, p.qkvw, p.qkvb, N, C, 3*C)
	m.attentionForwardFast(ba.atty, ba.att, ba.qkv, B, T)
	g.Sgemm(false, true, N, C, C, 1, ba.atty, C, p.attprojw, C, 0, ba.res2, C)
	m.biasResidual(ba.res2, x, p.attprojb, N, C) // res2 = x + proj(atty)
	m.layernormForwardFast(ba.ln2, ba.ln2Mean, ba.ln2Rstd, ba.res2, p.ln2w, p.ln2b, N)
	g.Sgemm(false, true, N, M, C, 1, ba.ln2, C, p.fcw, C, 0, ba.fch, M)
	m.biasGelu(ba.fch, ba.fchGelu, p.fcb, N, M)
	if out != nil {
		g.Sgemm(false, true, N, C, M, 1, ba.fchGelu, M, p.fcprojw, M, 0, out, C)
		m.biasResidual(out, ba.res2, p.fcprojb, N, C)
	}
}

// blockBackwardFast is blockBackward on the fast path.
func (m *Model) blockBackwardFast(l int, x []float32, ba *blockActs, dres []float32) {
	p, g, a := &m.p.blocks[l], &m.g.blocks[l], &m.a
	B, T := a.B, a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	m.matmulBackwardFast(a.dfch, g.fcprojw, g.fcprojb, dres, ba.fchGelu, p.fcprojw, N, M, C)
	m.geluBackward(a.dfch, ba.fch, a.dfch)
	m.matmulBackwardFast(a.dln, g.fcw, g.fcb, a.dfch, ba.ln2, p.fcw, N, C, M)
	m.layernormBackwardFast(dres, true, g.ln2w, g.ln2b, a.dln, ba.res2, p.ln2w, ba.ln2Mean, ba.ln2Rstd, N) // dres = d(res2)
	m.matmulBackwardFast(a.datty, g.attprojw, g.attprojb, dres, ba.atty, p.attprojw, N, C, C)
	m.attentionBackwardFast(a.dqkv, a.datt, a.datty, ba.qkv, ba.att, B, T)
	m.matmulBackwardFast(a.dln, g.qkvw, g.qkvb, a.dqkv, ba.ln1, p.qkvw, N, C, 3*C)
	m.layernormBackwardFast(dres, true, g.ln1w, g.ln1b, a.dln, x, p.ln1w, ba.ln1Mean, ba.ln1Rstd, N) // dres = d(x)
}

// matmulBackwardFast is matmulBackward with the bias gradient's column
// sums on the pool.
func (m *Model) matmulBackwardFast(dinp, dw, dbias, dout, inp, w []float32, N, IC, OC int) {
	m.opt.Gemm.Sgemm(false, false, N, IC, OC, 1, dout, OC, w, IC, 0, dinp, IC)
	m.round(dinp[:N*IC])
	dst := m.gradOut(dw)
	m.opt.Gemm.Sgemm(true, false, OC, IC, N, 1, dout, OC, inp, IC, 0, dst, IC)
	m.gradCommit(dw, dst)
	if dbias != nil {
		acc := m.colAcc[:OC]
		m.jobs.fast.cols = colSumJob{acc: acc, x: dout, N: N, W: OC}
		m.pool.Run(OC, 64, &m.jobs.fast.cols)
		m.jobs.fast.cols = colSumJob{}
		m.addColumnSums(dbias, acc)
	}
}

// colSumJob sets acc[i] = Σ_rows x[r, i] (x is (N, W)) for columns
// [lo, hi), each sum in row order, in float64.
type colSumJob struct {
	acc  []float64
	x    []float32
	N, W int
}

func (j *colSumJob) RunRange(lo, hi int) {
	acc := j.acc[lo:hi]
	clear(acc)
	for r := range j.N {
		for i, v := range j.x[r*j.W+lo : r*j.W+hi] {
			acc[i] += float64(v)
		}
	}
}

// biasResidual: out = (out + bias) + x per row, out (N, C) holding a
// Linear's product without its bias. With a 16-bit DType the Linear's
// output (bias included) and the sum are each rounded, as two ops.
func (m *Model) biasResidual(out, x, bias []float32, N, C int) {
	m.jobs.fast.bres = biasResJob{out: out, x: x, bias: bias, C: C, round: m.rounding}
	m.pool.Run(N, max(1, 4096/C), &m.jobs.fast.bres)
	m.jobs.fast.bres = biasResJob{}
}

type biasResJob struct {
	out, x, bias []float32
	C            int
	round        func([]float32) // 16-bit rounding, or nil
}

func (j *biasResJob) RunRange(lo, hi int) {
	C := j.C
	for r := lo; r < hi; r++ {
		o, x := j.out[r*C:][:C], j.x[r*C:][:C]
		if j.round != nil {
			for i, b := range j.bias[:C] {
				o[i] += b
			}
			j.round(o)
			for i, v := range x {
				o[i] += v
			}
			j.round(o)
			continue
		}
		for i, b := range j.bias[:C] {
			o[i] = (o[i] + b) + x[i]
		}
	}
}

// biasGelu: pre += bias per row, then act = gelu(pre), pre and act (N, M).
// With a 16-bit DType pre (the Linear's output) and act are each rounded.
func (m *Model) biasGelu(pre, act, bias []float32, N, M int) {
	m.jobs.fast.bgelu = biasGeluJob{pre: pre, act: act, bias: bias, M: M, round: m.rounding}
	m.pool.Run(N, max(1, 4096/M), &m.jobs.fast.bgelu)
	m.jobs.fast.bgelu = biasGeluJob{}
}

type biasGeluJob struct {
	pre, act, bias []float32
	M              int
	round          func([]float32) // 16-bit rounding, or nil
}

func (j *biasGeluJob) RunRange(lo, hi int) {
	M := j.M
	for r := lo; r < hi; r++ {
		p, a := j.pre[r*M:][:M], j.act[r*M:][:M]
		if j.round != nil {
			for i, b := range j.bias[:M] {
				p[i] += b
			}
			j.round(p)
			geluRange(a, p)
			j.round(a)
			continue
		}
		for i, b := range j.bias[:M] {
			p[i] += b
		}
		geluRange(a, p)
	}
}

// geluFast and geluBackFast are the GELU and its derivative times dout in
// float32 with fastTanh: geluRange's and geluBackRange's tail, and their
// whole loop without AVX2 and FMA (expvec_amd64.go).
func geluFast(x float32) float32 {
	return 0.5 * x * (1 + fastTanh(geluBeta*(x+geluKappa*x*x*x)))
}

func geluBackFast(dout, x float32) float32 {
	th := fastTanh(geluBeta * (x + geluKappa*x*x*x))
	left := 0.5 * (1 + th)
	right := 0.5 * x * (1 - th*th) * geluBeta * (1 + 3*geluKappa*x*x)
	return dout * (left + right)
}

// layernormForwardFast is layernormForward with the rows on the pool.
func (m *Model) layernormForwardFast(out, mean, rstd, inp, w, b []float32, N int) {
	m.jobs.fast.ln = lnJob{out: out, mean: mean, rstd: rstd, inp: inp, w: w, b: b, C: m.cfg.Dim, eps: m.cfg.Eps, round: m.rounding}
	m.pool.Run(N, max(1, 2048/m.cfg.Dim), &m.jobs.fast.ln)
	m.jobs.fast.ln = lnJob{}
}

type lnJob struct {
	out, mean, rstd, inp, w, b []float32
	C                          int
	eps                        float32
	round                      func([]float32) // 16-bit rounding of each output row, or nil
}

func (j *lnJob) RunRange(lo, hi int) {
	C := j.C
	for r := lo; r < hi; r++ {
		x := j.inp[r*C:][:C]
		var s float64
		for _, v := range x {
			s += float64(v)
		}
		mu := s / float64(C)
		var ss float64
		for _, v := range x {
			d := float64(v) - mu
			ss += d * d
		}
		mu32, var32 := float32(mu), float32(ss/float64(C))
		rs := 1 / float32(math.Sqrt(float64(var32+j.eps)))
		shift := -rs * mu32
		o := j.out[r*C:][:C]
		for i := range o {
			o[i] = (x[i]*rs+shift)*j.w[i] + j.b[i]
		}
		if j.round != nil {
			j.round(o)
		}
		j.mean[r], j.rstd[r] = mu32, rs
	}
}

// layernormBackwardFast is layernormBackward with the rows and the
// parameter gradients' columns on the pool; with add, the input gradient
// is added into dinp (the residual stream's gradient) instead of written.
func (m *Model) layernormBackwardFast(dinp []float32, add bool, dw, db, dout, inp, w, mean, rstd []float32, N int) {
	C := m.cfg.Dim
	m.jobs.fast.lnBack = lnBackJob{dinp: dinp, dout: dout, inp: inp, w: w, mean: mean, rstd: rstd, C: C, add: add, near: m.nearest}
	m.pool.Run(N, max(1, 2048/C), &m.jobs.fast.lnBack)
	m.jobs.fast.lnBack = lnBackJob{}
	acc := m.colAcc[:2*C]
	m.jobs.fast.lnCols = lnColsJob{accW: acc[:C], accB: acc[C:], dout: dout, inp: inp, mean: mean, rstd: rstd, N: N, C: C}
	m.pool.Run(C, 64, &m.jobs.fast.lnCols)
	m.jobs.fast.lnCols = lnColsJob{}
	m.addColumnSums(dw, acc[:C])
	m.addColumnSums(db, acc[C:])
}

type lnBackJob struct {
	dinp, dout, inp, w, mean, rstd []float32
	C                              int
	add                            bool
	// near is the 16-bit rounding, or nil: the input gradient is
	// rounded, and so is its sum with the residual stream's (two ops).
	near func(float32) float32
}

func (j *lnBackJob) RunRange(lo, hi int) {
	C := j.C
	invC := 1 / float32(C)
	w := j.w[:C]
	for r := lo; r < hi; r++ {
		x, dy, dx := j.inp[r*C:][:C], j.dout[r*C:][:C], j.dinp[r*C:][:C]
		var ds, dbs float64
		for i := range dy {
			dyw := float64(dy[i] * w[i])
			ds += dyw * float64(x[i])
			dbs += dyw
		}
		a := j.rstd[r]
		k1 := (float32(dbs)*j.mean[r] - float32(ds)) * a * a * a * invC
		k2 := -k1*j.mean[r] - float32(dbs)*a*invC
		switch rd := j.near; {
		case rd != nil && j.add:
			for i := range dx {
				dx[i] = rd(dx[i] + rd(a*dy[i]*w[i]+k1*x[i]+k2))
			}
		case rd != nil:
			for i := range dx {
				dx[i] = rd(a*dy[i]*w[i] + k1*x[i] + k2)
			}
		case j.add:
			for i := range dx {
				dx[i] += a*dy[i]*w[i] + k1*x[i] + k2
			}
		default:
			for i := range dx {
				dx[i] = a*dy[i]*w[i] + k1*x[i] + k2
			}
		}
	}
}

// lnColsJob sums LayerNorm's weight and bias gradients for columns
// [lo, hi): accW = Σ_rows dout·x̂, accB = Σ_rows dout, in row order.
type lnColsJob struct {
	accW, accB            []float64
	dout, inp, mean, rstd []float32
	N, C                  int
}

func (j *lnColsJob) RunRange(lo, hi int) {
	C := j.C
	accW, accB := j.accW[lo:hi], j.accB[lo:hi]
	clear(accW)
	clear(accB)
	for r := range j.N {
		x, dy := j.inp[r*C+lo:r*C+hi], j.dout[r*C+lo:r*C+hi]
		a := j.rstd[r]
		shift := -a * j.mean[r]
		for i := range dy {
			accW[i] += float64(dy[i] * (x[i]*a + shift))
			accB[i] += float64(dy[i])
		}
	}
}
