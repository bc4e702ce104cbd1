package llama

import (
	"math"

	"github.com/dszero/dszero/model"
)

// The element-wise and row-wise ops of the decoder, each a forward and
// its mirror-image backward over plain slices with explicit sizes, so
// that they can move behind a device interface one by one. Forward
// outputs are written (=); backward functions write activation gradients
// and return parameter-gradient sums for the model to commit. Reductions
// that torch does in float32 are accumulated in float64 here; everything
// else is float32 in torch's order of operations. None of them rounds to
// 16 bits: the model rounds each op's output once (Options.Round).

// rmsnormForward normalises each of the rows rows of x (cols wide,
// contiguous) as LlamaRMSNorm does in float32:
//
//	rstd = 1/√(mean(x²) + eps),  out = w ⊙ (x·rstd)
//
// and keeps rstd (rows) for backward. out may not alias x.
func rmsnormForward(out, rstd, x, w []float32, rows, cols int, eps float32) {
	for r := range rows {
		xr := x[r*cols:][:cols]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		variance := float32(ss / float64(cols))
		rs := float32(1 / math.Sqrt(float64(variance+eps)))
		o := out[r*cols:][:cols]
		for i, v := range xr {
			o[i] = w[i] * float32(v*rs)
		}
		rstd[r] = rs
	}
}

// rmsnormBackward writes dx (rows, cols) from dy and adds each column's
// weight-gradient sum Σ_rows dy·x·rstd into dw (float64, cols):
//
//	dx = rstd·(w⊙dy) − x·rstd³/cols · Σ(w⊙dy⊙x)
//
// dx may alias dy.
func rmsnormBackward(dx []float32, dw []float64, dy, x, w, rstd []float32, rows, cols int) {
	_ = dw[:cols]
	for r := range rows {
		xr, g := x[r*cols:][:cols], dy[r*cols:][:cols]
		rs := rstd[r]
		var dot float64
		for i, v := range xr {
			dot += float64(g[i]*w[i]) * float64(v)
			dw[i] += float64(g[i]) * float64(v*rs)
		}
		k := float32(dot) * rs * rs * rs / float32(cols)
		d := dx[r*cols:][:cols]
		for i, v := range xr {
			d[i] = rs*(w[i]*g[i]) - k*v
		}
	}
}

// swigluForward: out = silu(gate) ⊙ up, silu(g) = g·σ(g), evaluated in
// float64 and rounded to float32 once.
func swigluForward(out, gate, up []float32) {
	up, gate = up[:len(out)], gate[:len(out)]
	for i, g := range gate {
		x := float64(g)
		out[i] = float32(x / (1 + math.Exp(-x)) * float64(up[i]))
	}
}

// swigluBackward turns da (the gradient of silu(gate)⊙up) into
//
//	dgate = da⊙up⊙σ(g)⊙(1 + g⊙(1−σ(g))),  dup = da⊙silu(g)
//
// dup may alias da.
func swigluBackward(dgate, dup, da, gate, up []float32) {
	n := len(da)
	dgate, dup, gate, up = dgate[:n], dup[:n], gate[:n], up[:n]
	for i, g := range gate {
		x, d := float64(g), float64(da[i])
		s := 1 / (1 + math.Exp(-x))
		dgate[i] = float32(d * float64(up[i]) * s * (1 + x*(1-s)))
		dup[i] = float32(d * x * s)
	}
}

// residualForward: out = x + y (out may alias either).
func residualForward(out, x, y []float32) {
	x, y = x[:len(out)], y[:len(out)]
	for i := range out {
		out[i] = x[i] + y[i]
	}
}

// addInto: dst += src, the sum of two gradient paths into one tensor.
func addInto(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// embeddingForward: out[n] = table[tokens[n]], rows of width H.
func embeddingForward(out, table []float32, tokens []int32, H int) {
	for n, tok := range tokens {
		copy(out[n*H:][:H], table[int(tok)*H:][:H])
	}
}

// ceRows is the softmax cross-entropy over rows [lo, hi) of logits (N, V)
// with IgnoreIndex targets taking no loss, forward or backward.
type ceRows struct {
	logits, lseMax, lseLog, losses []float32
	targets                        []int32
	V                              int
	d                              float32 // backward: the loss gradient of each counted position
	backward                       bool
}

func (j *ceRows) RunRange(lo, hi int) {
	V := j.V
	for r := lo; r < hi; r++ {
		x := j.logits[r*V:][:V]
		t := int(j.targets[r])
		if t == model.IgnoreIndex {
			if j.backward {
				clear(x)
			} else {
				j.losses[r] = 0
			}
			continue
		}
		if !j.backward {
			// log_softmax as torch: (x − max) − log Σ exp(x − max).
			mx := x[0]
			for _, v := range x[1:] {
				mx = max(mx, v)
			}
			var sum float64
			for _, v := range x {
				sum += math.Exp(float64(v - mx))
			}
			lg := float32(math.Log(sum))
			j.lseMax[r], j.lseLog[r] = mx, lg
			j.losses[r] = -((x[t] - mx) - lg)
			continue
		}
		// dlogits = (softmax − onehot(t))·d, in place.
		mx, lg, d := j.lseMax[r], j.lseLog[r], j.d
		for i, v := range x {
			x[i] = float32(math.Exp(float64((v-mx)-lg))) * d
		}
		x[t] -= d
	}
}

// swigluJob runs swigluForward or swigluBackward over [lo, hi).
type swigluJob struct {
	out, gate, up, dgate, da []float32
	backward                 bool
}

func (j *swigluJob) RunRange(lo, hi int) {
	if j.backward {
		swigluBackward(j.dgate[lo:hi], j.out[lo:hi], j.da[lo:hi], j.gate[lo:hi], j.up[lo:hi])
		return
	}
	swigluForward(j.out[lo:hi], j.gate[lo:hi], j.up[lo:hi])
}
