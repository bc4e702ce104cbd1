//go:build purego || !amd64

package gpt

// expSubSum is Σ e^((x[i]−a)−b) over x, in float64.
func expSubSum(x []float32, a, b float32) float64 {
	var sum float64
	for _, v := range x {
		sum += float64(fastExp((v - a) - b))
	}
	return sum
}

// expSubScale sets x[i] = e^((x[i]−a)−b)·d.
func expSubScale(x []float32, a, b, d float32) {
	for i, v := range x {
		x[i] = fastExp((v-a)-b) * d
	}
}

func haveVec() bool { return false }

// geluRange sets out[i] = gelu(in[i]) (len(out) elements).
func geluRange(out, in []float32) {
	for i := range out {
		out[i] = geluFast(in[i])
	}
}

// geluBackRange sets dinp[i] = dout[i]·gelu'(in[i]) (len(dinp) elements).
func geluBackRange(dinp, in, dout []float32) {
	for i := range dinp {
		dinp[i] = geluBackFast(dout[i], in[i])
	}
}

// tanhRange sets out[i] = tanh(in[i]) (len(out) elements).
func tanhRange(out, in []float32) {
	for i := range out {
		out[i] = fastTanh(in[i])
	}
}
