package gpt

import (
	"math"
	"strconv"

	"github.com/dszero/dszero/model"
)

// ref64 is an independent float64 GPT-2 forward, written as directly as
// possible from the architecture description (no shared code with the
// model): the oracle for the gradient checks.
type ref64 struct {
	cfg Config
	l   model.Layout
	p   []float64 // flat parameters, cfg's layout
}

func newRef64(cfg Config, params []float32) *ref64 {
	cfg = cfg.WithDefaults()
	r := &ref64{cfg: cfg, l: cfg.Layout(), p: make([]float64, len(params))}
	for i, v := range params {
		r.p[i] = float64(v)
	}
	return r
}

func (r *ref64) get(name string) []float64 {
	i, ok := r.l.Index(name)
	if !ok {
		panic("ref64: no parameter " + name)
	}
	s := r.l.Specs[i]
	return r.p[s.Offset : s.Offset+s.Numel]
}

// linear: y[o] = Σ_i w[o, i] x[i] + b[o] for every row.
func linear64(x [][]float64, w, b []float64, out int) [][]float64 {
	y := make([][]float64, len(x))
	for n, row := range x {
		y[n] = make([]float64, out)
		in := len(row)
		for o := range out {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for i, v := range row {
				s += w[o*in+i] * v
			}
			y[n][o] = s
		}
	}
	return y
}

func layernorm64(x [][]float64, w, b []float64, eps float64) [][]float64 {
	y := make([][]float64, len(x))
	for n, row := range x {
		mean := 0.0
		for _, v := range row {
			mean += v
		}
		mean /= float64(len(row))
		vr := 0.0
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		vr /= float64(len(row))
		y[n] = make([]float64, len(row))
		for i, v := range row {
			y[n][i] = (v-mean)/math.Sqrt(vr+eps)*w[i] + b[i]
		}
	}
	return y
}

func add64(x, y [][]float64) [][]float64 {
	out := make([][]float64, len(x))
	for n := range x {
		out[n] = make([]float64, len(x[n]))
		for i := range x[n] {
			out[n][i] = x[n][i] + y[n][i]
		}
	}
	return out
}

// loss is the mean cross-entropy of the (B, T) tokens against targets.
func (r *ref64) loss(tokens, targets []int32, B int) float64 {
	c := r.cfg
	T, C, NH := len(tokens)/B, c.Dim, c.Heads
	HS := C / NH
	eps := float64(c.Eps)
	wte, wpe := r.get("wte.weight"), r.get("wpe.weight")
	x := make([][]float64, B*T)
	for b := range B {
		for t := range T {
			tok := int(tokens[b*T+t])
			x[b*T+t] = make([]float64, C)
			for i := range C {
				x[b*T+t][i] = wte[tok*C+i] + wpe[t*C+i]
			}
		}
	}
	for l := range c.Layers {
		p := func(s string) []float64 { return r.get("blocks." + strconv.Itoa(l) + "." + s) }
		h := layernorm64(x, p("ln1.weight"), p("ln1.bias"), eps)
		qkv := linear64(h, p("attn.qkv.weight"), p("attn.qkv.bias"), 3*C)
		y := make([][]float64, B*T)
		for n := range y {
			y[n] = make([]float64, C)
		}
		for b := range B {
			for hd := range NH {
				for t := range T {
					q := qkv[b*T+t][hd*HS : hd*HS+HS]
					scores := make([]float64, t+1)
					mx := math.Inf(-1)
					for t2 := 0; t2 <= t; t2++ {
						k := qkv[b*T+t2][C+hd*HS : C+hd*HS+HS]
						s := 0.0
						for i := range q {
							s += q[i] * k[i]
						}
						scores[t2] = s / math.Sqrt(float64(HS))
						mx = math.Max(mx, scores[t2])
					}
					z := 0.0
					for t2 := range scores {
						scores[t2] = math.Exp(scores[t2] - mx)
						z += scores[t2]
					}
					for t2 := range scores {
						v := qkv[b*T+t2][2*C+hd*HS : 2*C+hd*HS+HS]
						for i := range HS {
							y[b*T+t][hd*HS+i] += scores[t2] / z * v[i]
						}
					}
				}
			}
		}
		x = add64(x, linear64(y, p("attn.proj.weight"), p("attn.proj.bias"), C))
		h = layernorm64(x, p("ln2.weight"), p("ln2.bias"), eps)
		f := linear64(h, p("mlp.fc.weight"), p("mlp.fc.bias"), c.MLP)
		for _, row := range f {
			for i, u := range row {
				row[i] = 0.5 * u * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(u+0.044715*u*u*u)))
			}
		}
		x = add64(x, linear64(f, p("mlp.proj.weight"), p("mlp.proj.bias"), C))
	}
	h := layernorm64(x, r.get("ln_f.weight"), r.get("ln_f.bias"), eps)
	head := r.get("wte.weight")
	if !c.Tied {
		head = r.get("lm_head.weight")
	}
	logits := linear64(h, head, nil, c.Vocab)
	total := 0.0
	for n, row := range logits {
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(v - mx)
		}
		total += mx + math.Log(z) - row[targets[n]]
	}
	return total / float64(len(logits))
}
