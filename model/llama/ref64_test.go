package llama

import (
	"math"

	"github.com/dszero/dszero/model"
)

// ref64 is an independent float64 forward of the family, written as
// directly as possible from the architecture (no code shared with the
// model but the layout and the rotary frequencies): the oracle of the
// gradient checks.
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

// get returns the named tensor, or nil when the layout has none.
func (r *ref64) get(name string) []float64 {
	i, ok := r.l.Index(name)
	if !ok {
		return nil
	}
	s := r.l.Specs[i]
	return r.p[s.Offset : s.Offset+s.Numel]
}

// lin: y[o] = Σ_i w[o, i] x[i] + b[o], b optional.
func lin(x, w, b []float64, out int) []float64 {
	y := make([]float64, out)
	in := len(x)
	for o := range out {
		s := 0.0
		if b != nil {
			s = b[o]
		}
		for i, v := range x {
			s += w[o*in+i] * v
		}
		y[o] = s
	}
	return y
}

func rms(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = w[i] * v * r
	}
	return y
}

// loss is the mean (or sum / b.LossDenom) cross-entropy over the targets
// that are not ignored.
func (r *ref64) loss(b model.Batch) float64 {
	c := r.cfg
	B, T := b.B, len(b.Tokens)/b.B
	H, D, nH, nKV := c.Hidden, c.HeadDim, c.Heads, c.KVHeads
	eps := float64(float32(c.Eps))
	inv, scaling := c.InvFreq()
	pos := func(bi, t int) int {
		if b.Positions == nil {
			return t
		}
		return int(b.Positions[bi*T+t])
	}
	embed := r.get("model.embed_tokens.weight")
	head := r.get("lm_head.weight")
	if head == nil {
		head = embed
	}
	total, count := 0.0, 0
	for bi := range B {
		h := make([][]float64, T)
		for t := range T {
			tok := int(b.Tokens[bi*T+t])
			h[t] = append([]float64(nil), embed[tok*H:(tok+1)*H]...)
		}
		// A key is visible when no position break lies between it and the
		// query (positions continue by one) and it is within the window.
		sameSeq := func(t2, t int) bool {
			for u := t2 + 1; u <= t; u++ {
				if pos(bi, u) != pos(bi, u-1)+1 {
					return false
				}
			}
			return true
		}
		for l := range c.Layers {
			p := "model.layers." + itoa(l) + "."
			w := c.Window(l)
			q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
			for t := range T {
				xn := rms(h[t], r.get(p+"input_layernorm.weight"), eps)
				q[t] = lin(xn, r.get(p+"self_attn.q_proj.weight"), r.get(p+"self_attn.q_proj.bias"), nH*D)
				k[t] = lin(xn, r.get(p+"self_attn.k_proj.weight"), r.get(p+"self_attn.k_proj.bias"), nKV*D)
				v[t] = lin(xn, r.get(p+"self_attn.v_proj.weight"), r.get(p+"self_attn.v_proj.bias"), nKV*D)
				for _, qk := range []struct {
					x     []float64
					heads int
					norm  string
				}{{q[t], nH, "q_norm"}, {k[t], nKV, "k_norm"}} {
					for hd := range qk.heads {
						seg := qk.x[hd*D : (hd+1)*D]
						if nw := r.get(p + "self_attn." + qk.norm + ".weight"); nw != nil {
							copy(seg, rms(seg, nw, eps))
						}
						for i := range D / 2 {
							a := float64(pos(bi, t)) * float64(inv[i])
							cs, sn := math.Cos(a)*scaling, math.Sin(a)*scaling
							x1, x2 := seg[i], seg[i+D/2]
							seg[i], seg[i+D/2] = x1*cs-x2*sn, x2*cs+x1*sn
						}
					}
				}
			}
			for t := range T {
				y := make([]float64, nH*D)
				for j := range nH {
					g := j / (nH / nKV)
					var vis []int
					for t2 := 0; t2 <= t; t2++ {
						if sameSeq(t2, t) && (w == 0 || t-t2 < w) {
							vis = append(vis, t2)
						}
					}
					s := make([]float64, len(vis))
					mx := math.Inf(-1)
					for i, t2 := range vis {
						for d := range D {
							s[i] += q[t][j*D+d] * k[t2][g*D+d]
						}
						s[i] /= math.Sqrt(float64(D))
						mx = math.Max(mx, s[i])
					}
					sum := 0.0
					for i := range s {
						s[i] = math.Exp(s[i] - mx)
						sum += s[i]
					}
					for i, t2 := range vis {
						for d := range D {
							y[j*D+d] += s[i] / sum * v[t2][g*D+d]
						}
					}
				}
				o := lin(y, r.get(p+"self_attn.o_proj.weight"), r.get(p+"self_attn.o_proj.bias"), H)
				for i := range h[t] {
					h[t][i] += o[i]
				}
				xn := rms(h[t], r.get(p+"post_attention_layernorm.weight"), eps)
				gate := lin(xn, r.get(p+"mlp.gate_proj.weight"), r.get(p+"mlp.gate_proj.bias"), c.Intermediate)
				up := lin(xn, r.get(p+"mlp.up_proj.weight"), r.get(p+"mlp.up_proj.bias"), c.Intermediate)
				for i, gv := range gate {
					gate[i] = gv / (1 + math.Exp(-gv)) * up[i]
				}
				d := lin(gate, r.get(p+"mlp.down_proj.weight"), r.get(p+"mlp.down_proj.bias"), H)
				for i := range h[t] {
					h[t][i] += d[i]
				}
			}
		}
		for t := range T {
			tgt := int(b.Targets[bi*T+t])
			if tgt == model.IgnoreIndex {
				continue
			}
			xf := rms(h[t], r.get("model.norm.weight"), eps)
			logits := lin(xf, head, nil, c.Vocab)
			mx := math.Inf(-1)
			for _, z := range logits {
				mx = math.Max(mx, z)
			}
			sum := 0.0
			for _, z := range logits {
				sum += math.Exp(z - mx)
			}
			total += math.Log(sum) + mx - logits[tgt]
			count++
		}
	}
	if b.LossDenom > 0 {
		return total / b.LossDenom
	}
	if count == 0 {
		return 0
	}
	return total / float64(count)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
