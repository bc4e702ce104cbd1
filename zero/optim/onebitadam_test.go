package optim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/comm/inproc"
)

func TestOneBitPadded(t *testing.T) {
	tests := []struct{ n, size, want int }{
		{5, 2, 16}, {16, 2, 16}, {17, 2, 32}, {5, 3, 72}, {72, 3, 72}, {1, 4, 32}, {33, 4, 64}, {7, 8, 64}, {1, 1, 8},
	}
	for _, tc := range tests {
		if got := OneBitPadded(tc.n, tc.size); got != tc.want {
			t.Errorf("OneBitPadded(%d, %d) = %d, want %d", tc.n, tc.size, got, tc.want)
		}
	}
}

// oneBitRef is DeepSpeed's OnebitAdam.step for every rank at once, in
// float64, written from onebit/adam.py: the initialization pass, the
// warm-up on averaged gradients, the freeze, the compressed momentum
// (commtest.CompressedModel per tensor, padded as DeepSpeed pads it).
type oneBitRef struct {
	cfg         OneBitAdamConfig
	segs        []Segment
	n           int // ranks
	p, m, v     [][]float64
	models      []*commtest.CompressedModel
	steps       int64
	initialized bool
	frozen      bool
}

func (r *oneBitRef) step(grads [][]float64) {
	r.steps++
	if !r.initialized {
		r.initialized = true
		return // the compressed all-reduce of a zero momentum leaves it zero
	}
	b1, b2 := r.cfg.Betas[0], r.cfg.Betas[1]
	avg := make([]float64, len(grads[0]))
	for _, g := range grads {
		for i, x := range g {
			avg[i] += x / float64(r.n)
		}
	}
	for k := range r.n {
		g := grads[k]
		if !r.frozen {
			g = avg
		}
		for i := range g {
			r.m[k][i] = b1*r.m[k][i] + (1-b1)*g[i]
			if !r.frozen {
				r.v[k][i] = b2*r.v[k][i] + (1-b2)*g[i]*g[i]
			}
		}
	}
	if r.frozen && r.n > 1 {
		for si, s := range r.segs {
			N := OneBitPadded(s.Len, r.n)
			if r.models[si] == nil {
				r.models[si] = commtest.NewCompressedModel(N, r.n)
			}
			in := make([][]float64, r.n)
			for k := range r.n {
				in[k] = make([]float64, N)
				copy(in[k], r.m[k][s.Start:s.Start+s.Len])
			}
			out := r.models[si].Step(in)
			for k := range r.n {
				copy(r.m[k][s.Start:s.Start+s.Len], out)
			}
		}
	}
	for k := range r.n {
		for i := range r.p[k] {
			u := r.m[k][i] / (math.Sqrt(r.v[k][i]) + r.cfg.Eps)
			if r.cfg.WeightDecay > 0 {
				u += r.cfg.WeightDecay * r.p[k][i]
			}
			r.p[k][i] -= r.cfg.LR * u
		}
	}
	if !r.frozen && r.steps >= r.cfg.FreezeStep {
		r.frozen = true
	}
}

// TestOneBitAdamMatchesReference runs 1-bit Adam on 1 to 3 ranks through
// the initialization pass, warm-up, the freeze and compressed steps, with
// tensors whose lengths need padding, against oneBitRef.
func TestOneBitAdamMatchesReference(t *testing.T) {
	segs := []Segment{{Param: 0, Start: 0, Len: 5}, {Param: 1, Start: 5, Len: 37}, {Param: 2, Start: 42, Len: 1}}
	const total, steps = 43, 9
	for _, n := range []int{1, 2, 3} {
		for _, freeze := range []int64{1, 4} {
			t.Run(fmt.Sprintf("ranks=%d/freeze_step=%d", n, freeze), func(t *testing.T) {
				cfg := DefaultOneBitAdamConfig()
				cfg.LR, cfg.FreezeStep, cfg.WeightDecay = 0.01, freeze, 0.1
				init := make([]float64, total)
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range init {
					init[i] = float64(float32(rng.NormFloat64()))
				}
				grads := make([][][]float64, steps) // step, rank, element
				for s := range grads {
					grads[s] = make([][]float64, n)
					for k := range n {
						grads[s][k] = make([]float64, total)
						for i := range total {
							grads[s][k][i] = float64(float32(rng.NormFloat64()*0.1 + 0.05*float64(k)))
						}
					}
				}
				ref := &oneBitRef{cfg: cfg, segs: segs, n: n, models: make([]*commtest.CompressedModel, len(segs))}
				for range n {
					ref.p = append(ref.p, append([]float64(nil), init...))
					ref.m = append(ref.m, make([]float64, total))
					ref.v = append(ref.v, make([]float64, total))
				}
				want := make([][][]float64, steps)
				for s := range steps {
					ref.step(grads[s])
					for k := range n {
						want[s] = append(want[s], append([]float64(nil), ref.p[k]...))
					}
				}
				err := inproc.New(n, inproc.Options{}).Run(func(c comm.Comm) error {
					o, err := NewOneBitAdam(cfg, total, segs, context.Background(), c, testAlloc())
					if err != nil {
						return err
					}
					defer o.Free()
					p := make([]float32, total)
					for i, x := range init {
						p[i] = float32(x)
					}
					g := make([]float32, total)
					for s := range steps {
						for i := range g {
							if o.LocalGradients() {
								g[i] = float32(grads[s][c.Rank()][i])
							} else { // what stage 0's averaged all-reduce hands it
								var sum float32
								for k := range n {
									sum += float32(grads[s][k][i])
								}
								g[i] = sum / float32(n)
							}
						}
						if err := o.StepExchange(p, g); err != nil {
							return err
						}
						for i, x := range want[s][c.Rank()] {
							if d := math.Abs(float64(p[i]) - x); d > 2e-5*max(1, math.Abs(x)) {
								return fmt.Errorf("rank %d, step %d (frozen %v): param %d is %g, want %g", c.Rank(), s+1, o.Frozen(), i, p[i], x)
							}
						}
					}
					if o.StepCount() != steps || !o.Frozen() {
						return fmt.Errorf("rank %d: %d steps, frozen %v", c.Rank(), o.StepCount(), o.Frozen())
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestOneBitAdamResumePhase: loading a step count sets the phase as
// DeepSpeed's load_state_dict does, and the first step after it is the
// initialization pass again.
func TestOneBitAdamResumePhase(t *testing.T) {
	cfg := DefaultOneBitAdamConfig()
	cfg.FreezeStep = 5
	o, err := NewOneBitAdam(cfg, 3, []Segment{{Len: 3}}, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free()
	for _, tc := range []struct {
		steps         int64
		frozen, local bool
	}{{4, false, false}, {5, true, true}, {9, true, true}} {
		o.SetStepCount(tc.steps)
		if o.Frozen() != tc.frozen || o.LocalGradients() != tc.local {
			t.Errorf("step %d: frozen %v local %v, want %v %v", tc.steps, o.Frozen(), o.LocalGradients(), tc.frozen, tc.local)
		}
	}
	p, g := []float32{1, 2, 3}, []float32{1, 1, 1}
	if err := o.StepExchange(p, g); err != nil {
		t.Fatal(err)
	}
	if p[0] != 1 || p[1] != 2 || p[2] != 3 || o.Frozen() {
		t.Errorf("the first step after loading updated %v (frozen %v); DeepSpeed's is the initialization pass", p, o.Frozen())
	}
}

func TestOneBitAdamConfigErrors(t *testing.T) {
	for _, c := range []OneBitAdamConfig{
		{LR: -1, Betas: [2]float64{0.9, 0.999}},
		{LR: 1, Betas: [2]float64{1, 0.999}},
		{LR: 1, Betas: [2]float64{0.9, 0.999}, FreezeStep: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// zeroSolo is a one-rank Comm that must not be used.
type zeroSolo struct{ comm.Comm }

func (zeroSolo) Size() int { return 1 }
func (zeroSolo) Rank() int { return 0 }

func TestOneBitConfigsValidate(t *testing.T) {
	zo := DefaultZeroOneAdamConfig()
	lamb := DefaultOneBitLambConfig()
	if err := zo.Validate(); err != nil {
		t.Errorf("0/1 Adam defaults: %v", err)
	}
	if err := lamb.Validate(); err != nil {
		t.Errorf("1-bit Lamb defaults: %v", err)
	}
	badZO := []func(*ZeroOneAdamConfig){
		func(c *ZeroOneAdamConfig) { c.LocalStepClipper = 0 },
		func(c *ZeroOneAdamConfig) { c.VarFreezeStep = -1 },
		func(c *ZeroOneAdamConfig) { c.VarUpdateScaler = -1 },
		func(c *ZeroOneAdamConfig) { c.Eps = -1 },
	}
	for i, f := range badZO {
		c := DefaultZeroOneAdamConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("0/1 Adam case %d accepted: %+v", i, c)
		}
	}
	badLamb := []func(*OneBitLambConfig){
		func(c *OneBitLambConfig) { c.FreezeStep = -1 },
		func(c *OneBitLambConfig) { c.Betas[0] = 0 },
		func(c *OneBitLambConfig) { c.LR = math.NaN() },
	}
	for i, f := range badLamb {
		c := DefaultOneBitLambConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("1-bit Lamb case %d accepted: %+v", i, c)
		}
	}
}
