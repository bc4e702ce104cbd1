package gpt

import (
	"math"

	"github.com/dszero/dszero/model"
)

// Layers, each a forward and its mirror-image backward. Shapes use
// B (batch), T (sequence), N = B*T rows, C (width), M (MLP width),
// V (vocabulary). Forward outputs are written (=); backward writes
// activation gradients (=) and accumulates parameter gradients (+=), or
// writes them (=) in a Backward after OverwriteGrads.
//
// Every op output goes through m.round (16-bit emulation, a no-op
// otherwise). A parameter gradient of one Backward is computed whole
// (gradOut), rounded to the DType, and then added to the gradient buffer
// (gradCommit), like PyTorch's AccumulateGrad and like a 16-bit .grad
// added into fp32 accumulators. After OverwriteGrads it is computed
// straight into the gradient buffer instead, and nothing is added.

// jobs are the model's pre-allocated pool tasks (a dispatch allocates
// nothing).
type jobs struct {
	gelu  geluJob
	ce    ceJob
	attn  attnJob
	attnB attnBackJob
	mm    mmJob
	fast  fastJobs
}

func (m *Model) round(s []float32) {
	if m.rounding != nil {
		m.rounding(s)
	}
}

// gradOut and gradCommit are the model.GradSink protocol: a parameter
// gradient is computed whole in gradOut's slice, then rounded and added
// (or, after OverwriteGrads, written in place).
func (m *Model) gradOut(grad []float32) []float32 { return m.sink.Out(grad) }
func (m *Model) gradCommit(grad, dst []float32)   { m.sink.Commit(grad, dst) }

// encoderForward: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
func (m *Model) encoderForward(out []float32, tokens []int32, wte, wpe []float32, B, T int) {
	C := m.cfg.Dim
	for b := range B {
		for t := range T {
			o := out[(b*T+t)*C:][:C]
			te := wte[int(tokens[b*T+t])*C:][:C]
			pe := wpe[t*C:][:C]
			for i := range o {
				o[i] = te[i] + pe[i]
			}
		}
	}
	m.round(out[:B*T*C])
}

// encoderBackward: dwte[tokens[b,t],:] += dout[b,t,:], dwpe[t,:] += dout[b,t,:].
// With a 16-bit DType the wte rows are rounded after each add, as a 16-bit
// index_add does; the wpe gradient is summed over the batch in fp32 and
// rounded once. wpe rows T..Context-1 get no gradient: they keep theirs,
// or are zeroed after OverwriteGrads.
func (m *Model) encoderBackward(dwte, dwpe, dout []float32, tokens []int32, B, T int) {
	C := m.cfg.Dim
	if m.sink.Overwriting() {
		clear(dwpe[T*C:])
	}
	wpeRows := dwpe[:T*C]
	dst := m.gradOut(wpeRows)
	clear(dst)
	for b := range B {
		for t := range T {
			d, o := dst[t*C:][:C], dout[(b*T+t)*C:][:C]
			for i := range d {
				d[i] += o[i]
			}
		}
	}
	m.gradCommit(wpeRows, dst)

	tokens = tokens[:B*T]
	if m.sink.Overwriting() && !m.cfg.Tied {
		// The whole of dwte is this Backward's: the rows of the tokens,
		// zero elsewhere (embedding_dense_backward).
		clear(dwte)
		m.scatterRows(dwte, dout, tokens)
		return
	}
	// Add to dwte (accumulated, or holding the tied head's gradient of
	// this Backward): the fresh gradient is zero outside the tokens'
	// rows, so only those rows are computed in the scratch and added,
	// each once. An untouched row keeps its value, as grad + 0 would
	// (except that a -0 stays -0).
	dst = m.sink.Scratch[:len(dwte)]
	for _, tok := range tokens {
		clear(dst[int(tok)*C:][:C])
	}
	m.scatterRows(dst, dout, tokens)
	seen := m.rowSeen
	clear(seen)
	for _, tok := range tokens {
		r := int(tok)
		if seen[r/64]&(1<<(r%64)) != 0 {
			continue
		}
		seen[r/64] |= 1 << (r % 64)
		g, d := dwte[r*C:][:C], dst[r*C:][:C]
		for i, v := range d {
			g[i] += v
		}
	}
}

// scatterRows adds row bt of dout into row tokens[bt] of dst, rounding
// the row after each add (a 16-bit index_add).
func (m *Model) scatterRows(dst, dout []float32, tokens []int32) {
	C := m.cfg.Dim
	for bt, tok := range tokens {
		d, o := dst[int(tok)*C:][:C], dout[bt*C:][:C]
		for i := range d {
			d[i] += o[i]
		}
		m.round(d)
	}
}

// layernormForward normalises each of the N rows of inp (N, C):
// out = (x*rstd - mean*rstd) * w + b, rstd = 1/sqrt(var + eps) with the
// biased variance; mean and rstd (N) are kept for backward. The moments
// are accumulated in float64 and rounded to float32, the rest is float32
// in PyTorch's order.
func (m *Model) layernormForward(out, mean, rstd, inp, w, b []float32, N int) {
	if m.bf16 {
		m.layernormForwardBF16(out, mean, rstd, inp, w, b, N)
		return
	}
	C, eps := m.cfg.Dim, m.cfg.Eps
	for r := range N {
		x := inp[r*C:][:C]
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
		rs := 1 / float32(math.Sqrt(float64(var32+eps)))
		shift := -rs * mu32
		o := out[r*C:][:C]
		for i := range o {
			o[i] = (x[i]*rs+shift)*w[i] + b[i]
		}
		mean[r], rstd[r] = mu32, rs
	}
	m.round(out[:N*C])
}

// layernormBackward writes dinp (N, C) and accumulates dw, db (C):
//
//	dinp = rstd*dout*w + k1*x + k2,  k1 = (Σ dout*w*mean - Σ dout*w*x) * rstd³/C,
//	                                 k2 = -k1*mean - Σ dout*w * rstd/C
//	dw += Σ_rows dout * (x*rstd - mean*rstd),  db += Σ_rows dout
func (m *Model) layernormBackward(dinp, dw, db, dout, inp, w, mean, rstd []float32, N int) {
	if m.bf16 {
		m.layernormBackwardBF16(dinp, dw, db, dout, inp, w, mean, rstd, N)
		return
	}
	C := m.cfg.Dim
	invC := 1 / float32(C)
	for r := range N {
		x, dy, dx := inp[r*C:][:C], dout[r*C:][:C], dinp[r*C:][:C]
		var ds, dbs float64
		for i := range dy {
			dyw := float64(dy[i] * w[i])
			ds += dyw * float64(x[i])
			dbs += dyw
		}
		a := rstd[r]
		k1 := (float32(dbs)*mean[r] - float32(ds)) * a * a * a * invC
		k2 := -k1*mean[r] - float32(dbs)*a*invC
		for i := range dx {
			dx[i] = a*dy[i]*w[i] + k1*x[i] + k2
		}
	}
	m.round(dinp[:N*C])

	acc := m.colAcc[:2*C]
	clear(acc)
	accW, accB := acc[:C], acc[C:]
	for r := range N {
		x, dy := inp[r*C:][:C], dout[r*C:][:C]
		a := rstd[r]
		shift := -a * mean[r]
		for i := range dy {
			accW[i] += float64(dy[i] * (x[i]*a + shift))
			accB[i] += float64(dy[i])
		}
	}
	m.addColumnSums(dw, accW)
	m.addColumnSums(db, accB)
}

// addColumnSums adds float64 sums into a parameter gradient (writes
// them after OverwriteGrads).
func (m *Model) addColumnSums(grad []float32, sums []float64) {
	dst := m.gradOut(grad)
	for i, s := range sums {
		dst[i] = float32(s)
	}
	m.gradCommit(grad, dst)
}

// matmulForward is a Linear layer: out (N, OC) = inp (N, IC) · wᵀ + bias,
// w (OC, IC) in PyTorch layout, bias (OC) or nil. Like torch's addmm the
// bias is copied into out first and the product added with beta = 1.
func (m *Model) matmulForward(out, inp, w, bias []float32, N, IC, OC int) {
	if m.bf16 {
		m.matmulForwardBF16(out, inp, w, bias, N, IC, OC)
		return
	}
	var beta float32
	if bias != nil {
		for r := range N {
			copy(out[r*OC:][:OC], bias)
		}
		beta = 1
	}
	m.opt.Gemm.Sgemm(false, true, N, OC, IC, 1, inp, IC, w, IC, beta, out, OC)
	m.round(out[:N*OC])
}

// matmulBackward: dinp (N, IC) = dout (N, OC) · w; dw (OC, IC) += doutᵀ · inp;
// dbias (OC) += Σ_rows dout (dbias nil: no bias). The weight gradient is
// one GEMM with beta = 0, into the scratch or, after OverwriteGrads,
// straight into dw.
func (m *Model) matmulBackward(dinp, dw, dbias, dout, inp, w []float32, N, IC, OC int) {
	if m.bf16 {
		m.matmulBackwardBF16(dinp, dw, dbias, dout, inp, w, N, IC, OC)
		return
	}
	m.opt.Gemm.Sgemm(false, false, N, IC, OC, 1, dout, OC, w, IC, 0, dinp, IC)
	m.round(dinp[:N*IC])
	dst := m.gradOut(dw)
	m.opt.Gemm.Sgemm(true, false, OC, IC, N, 1, dout, OC, inp, IC, 0, dst, IC)
	m.gradCommit(dw, dst)
	if dbias != nil {
		m.biasGrad(dbias, dout, N, OC)
	}
}

// biasGrad adds dbias (OC) += Σ_rows dout (N, OC), summed in float64.
func (m *Model) biasGrad(dbias, dout []float32, N, OC int) {
	acc := m.colAcc[:OC]
	clear(acc)
	for r := range N {
		for i, v := range dout[r*OC:][:OC] {
			acc[i] += float64(v)
		}
	}
	m.addColumnSums(dbias, acc)
}

// residualForward: out = x + y (out may alias x or y).
func (m *Model) residualForward(out, x, y []float32) {
	for i := range out {
		out[i] = x[i] + y[i]
	}
	m.round(out)
}

// residualBackward adds a branch's input gradient into the residual
// stream's gradient: dres += dbranch (autograd's sum of two uses).
func (m *Model) residualBackward(dres, dbranch []float32) {
	for i := range dres {
		dres[i] += dbranch[i]
	}
	m.round(dres)
}

// GELU, tanh approximation: gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
const (
	geluBeta  = 0.7978845608028654 // √(2/π)
	geluKappa = 0.044715
)

type geluJob struct {
	out, inp, dout       []float32
	backward, bf16, fast bool
}

func (j *geluJob) RunRange(lo, hi int) {
	if j.fast {
		if j.backward {
			geluBackRange(j.out[lo:hi], j.inp[lo:hi], j.dout[lo:hi])
		} else {
			geluRange(j.out[lo:hi], j.inp[lo:hi])
		}
		return
	}
	if j.bf16 {
		for i := lo; i < hi; i++ {
			if j.backward {
				j.out[i] = geluBackwardBF16(j.dout[i], j.inp[i])
			} else {
				j.out[i] = geluBF16(j.inp[i])
			}
		}
		return
	}
	if !j.backward {
		for i := lo; i < hi; i++ {
			x := float64(j.inp[i])
			j.out[i] = float32(0.5 * x * (1 + math.Tanh(geluBeta*(x+geluKappa*x*x*x))))
		}
		return
	}
	for i := lo; i < hi; i++ {
		x := float64(j.inp[i])
		th := math.Tanh(geluBeta * (x + geluKappa*x*x*x))
		left := 0.5 * (1 + th)
		right := 0.5 * x * (1 - th*th) * geluBeta * (1 + 3*geluKappa*x*x)
		j.out[i] = float32(float64(j.dout[i]) * (left + right))
	}
}

// geluForward: out = gelu(inp), elementwise, computed in float64.
func (m *Model) geluForward(out, inp []float32) {
	m.jobs.gelu = geluJob{out: out, inp: inp, bf16: m.bf16, fast: m.fast}
	m.pool.Run(len(out), 4096, &m.jobs.gelu)
	m.jobs.gelu = geluJob{}
	m.round(out)
}

// geluBackward: dinp = dout · gelu'(inp) (dinp may alias dout).
func (m *Model) geluBackward(dinp, inp, dout []float32) {
	m.jobs.gelu = geluJob{out: dinp, inp: inp, dout: dout, backward: true, bf16: m.bf16, fast: m.fast}
	m.pool.Run(len(dinp), 4096, &m.jobs.gelu)
	m.jobs.gelu = geluJob{}
	m.round(dinp)
}

// ceJob is the softmax cross-entropy over rows [lo, hi) of logits (N, V).
type ceJob struct {
	logits, lseMax, lseLog, losses []float32
	targets                        []int32
	V                              int
	d                              float32 // backward: dloss per position
	backward                       bool
	bf16                           bool // torch's float32 kernels bit for bit (expf, logf, lane sums)
	fast                           bool // fastExp (Options.Fast)
}

func (j *ceJob) RunRange(lo, hi int) {
	V := j.V
	for r := lo; r < hi; r++ {
		x := j.logits[r*V:][:V]
		t := int(j.targets[r])
		if t == model.IgnoreIndex { // no loss here, and no gradient
			if j.backward {
				clear(x)
			} else {
				j.losses[r] = 0
			}
			continue
		}
		if !j.backward {
			// log_softmax as PyTorch: (x - max) - log(Σ exp(x - max)).
			mx := x[0]
			for _, v := range x[1:] {
				mx = max(mx, v)
			}
			var lg float32
			switch {
			case j.bf16:
				lg = logf(sumExpLanes(x, mx))
			case j.fast:
				lg = float32(math.Log(expSubSum(x, mx, 0)))
			default:
				var sum float64
				for _, v := range x {
					sum += math.Exp(float64(v - mx))
				}
				lg = float32(math.Log(sum))
			}
			j.lseMax[r], j.lseLog[r] = mx, lg
			j.losses[r] = -((x[t] - mx) - lg)
			continue
		}
		// dlogits = (softmax - onehot(t)) · d, in place.
		mx, lg, d := j.lseMax[r], j.lseLog[r], j.d
		if j.fast {
			expSubScale(x, mx, lg, d)
			x[t] -= d
			continue
		}
		for i, v := range x {
			var p float32
			if j.bf16 {
				p = expf((v - mx) - lg)
			} else {
				p = float32(math.Exp(float64((v - mx) - lg)))
			}
			x[i] = p * d
		}
		x[t] -= d
	}
}

// crossentropyForward writes per-position losses (N) and the row
// statistics backward needs, and returns the loss: the sum over the
// positions that take one (summed in float64) divided by div — their
// count for the mean — or 0 when none does.
func (m *Model) crossentropyForward(losses, lseMax, lseLog, logits []float32, targets []int32, N int, div float64) float32 {
	m.jobs.ce = ceJob{logits: logits, lseMax: lseMax, lseLog: lseLog, losses: losses, targets: targets, V: m.cfg.Vocab, bf16: m.bf16, fast: m.fast}
	m.pool.Run(N, 1, &m.jobs.ce)
	m.jobs.ce = ceJob{}
	if div == 0 {
		return 0
	}
	if m.bf16 {
		return nllSum(losses[:N]) / float32(div)
	}
	var sum float64
	for _, l := range losses[:N] {
		sum += float64(l)
	}
	return float32(sum / div)
}

// lossDivisor is what the summed losses of targets are divided by: denom
// when it is positive (the count over a whole accumulation window), else
// the number of targets that take a loss (the mean; 0 when none does).
func lossDivisor(targets []int32, denom float64) float64 {
	if denom > 0 {
		return denom
	}
	n := 0
	for _, t := range targets {
		if t != model.IgnoreIndex {
			n++
		}
	}
	return float64(n)
}

// crossentropyBackward turns logits (N, V) into dlogits in place, for a
// loss gradient of d per position (dlossScale/N for a mean).
func (m *Model) crossentropyBackward(logits, lseMax, lseLog []float32, targets []int32, d float32, N int) {
	m.jobs.ce = ceJob{logits: logits, lseMax: lseMax, lseLog: lseLog, targets: targets, V: m.cfg.Vocab, d: d, backward: true, bf16: m.bf16, fast: m.fast}
	m.pool.Run(N, 1, &m.jobs.ce)
	m.jobs.ce = ceJob{}
	m.round(logits[:N*m.cfg.Vocab])
}
