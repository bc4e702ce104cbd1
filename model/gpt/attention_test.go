package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// loopAttentionForward is the fp32 attention written as the plain loops
// whose summation order the engine must keep: every dot product and every
// weighted sum in order of its index, one float32 rounding per product
// and per sum (the explicit conversions stop any fusing).
func loopAttentionForward(out, att, qkv []float32, B, T, C, NH int, round func([]float32)) {
	HS, C3 := C/NH, 3*C
	scale := float32(1 / math.Sqrt(float64(HS)))
	for b := range B {
		for h := range NH {
			base := b * T * C3
			for t := range T {
				q := qkv[base+t*C3+h*HS:][:HS]
				row := att[((b*NH+h)*T+t)*T:][:T]
				s := row[:t+1]
				for t2 := range s {
					k := qkv[base+t2*C3+C+h*HS:][:HS]
					var dot float32
					for i := range q {
						dot += float32(q[i] * k[i])
					}
					s[t2] = dot * scale
				}
				if round != nil {
					round(s)
				}
				mx := s[0]
				for _, v := range s[1:] {
					mx = max(mx, v)
				}
				var sum float64
				for t2, v := range s {
					s[t2] = float32(math.Exp(float64(v - mx)))
					sum += float64(s[t2])
				}
				inv := 1 / float32(sum)
				for t2 := range s {
					s[t2] *= inv
				}
				clear(row[t+1:])
				if round != nil {
					round(s)
				}
				y := out[(b*T+t)*C+h*HS:][:HS]
				clear(y)
				for t2, p := range s {
					v := qkv[base+t2*C3+2*C+h*HS:][:HS]
					for i := range y {
						y[i] += float32(p * v[i])
					}
				}
				if round != nil {
					round(y)
				}
			}
		}
	}
}

// loopAttentionBackward is the mirror of loopAttentionForward.
func loopAttentionBackward(dqkv, dout, qkv, att []float32, B, T, C, NH int, round func([]float32)) {
	HS, C3 := C/NH, 3*C
	scale := float32(1 / math.Sqrt(float64(HS)))
	clear(dqkv)
	ds := make([]float32, T)
	for b := range B {
		for h := range NH {
			base := b * T * C3
			dsAll := make([][]float32, T)
			for t := range T {
				dy := dout[(b*T+t)*C+h*HS:][:HS]
				p := att[((b*NH+h)*T+t)*T:][:t+1]
				ds = make([]float32, t+1)
				for t2 := range ds {
					v := qkv[base+t2*C3+2*C+h*HS:][:HS]
					dv := dqkv[base+t2*C3+2*C+h*HS:][:HS]
					var dot float32
					for i, g := range dy {
						dot += float32(g * v[i])
						dv[i] += float32(p[t2] * g)
					}
					ds[t2] = dot
				}
				if round != nil {
					round(ds)
				}
				var sum float64
				for t2, g := range ds {
					sum += float64(p[t2] * g)
				}
				s := float32(sum)
				for t2, g := range ds {
					ds[t2] = p[t2] * (g - s)
				}
				if round != nil {
					round(ds)
				}
				for t2 := range ds {
					ds[t2] *= scale
				}
				dsAll[t] = ds
			}
			for t := range T {
				q := qkv[base+t*C3+h*HS:][:HS]
				dq := dqkv[base+t*C3+h*HS:][:HS]
				for t2, g := range dsAll[t] {
					k := qkv[base+t2*C3+C+h*HS:][:HS]
					dk := dqkv[base+t2*C3+C+h*HS:][:HS]
					for i := range dq {
						dq[i] += float32(g * k[i])
						dk[i] += float32(g * q[i])
					}
				}
			}
			if round != nil {
				for t := range T {
					for part := range 3 {
						round(dqkv[base+t*C3+part*C+h*HS:][:HS])
					}
				}
			}
		}
	}
}

// TestAttentionKeepsTheLoopOrder checks the fp32 attention (seqgemm with
// causal blocks and transposed scratch) against the plain loops bit for
// bit, on shapes whose T is no multiple of the row block and whose head
// size fills no whole vector, with and without fp16 rounding.
func TestAttentionKeepsTheLoopOrder(t *testing.T) {
	cases := []struct {
		B, T, C, NH int
		fp16        bool
	}{
		{1, 32, 64, 4, false}, // the tiny preset: HS 16
		{2, 13, 36, 3, false}, // HS 12: vector and scalar columns
		{1, 37, 96, 2, false}, // HS 48, T not a multiple of 4
		{2, 21, 40, 5, true},  // HS 8, fp16 rounding
		{1, 1, 8, 1, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("B%d_T%d_C%d_NH%d_fp16=%v", tc.B, tc.T, tc.C, tc.NH, tc.fp16), func(t *testing.T) {
			cfg := Config{Vocab: 16, Context: tc.T, Dim: tc.C, Heads: tc.NH, Layers: 1}
			var opt Options
			var round func([]float32)
			if tc.fp16 {
				round = func(x []float32) {
					for i, v := range x {
						x[i] = half.NearestF16(v)
					}
				}
				opt.DType = device.F16
			}
			m, _ := newTestModel(t, cfg, opt, nil)
			rng := rand.New(rand.NewPCG(uint64(tc.T), uint64(tc.C)))
			B, T, C, NH := tc.B, tc.T, tc.C, tc.NH
			qkv, dout := make([]float32, B*T*3*C), make([]float32, B*T*C)
			for i := range qkv {
				qkv[i] = float32(rng.NormFloat64())
			}
			for i := range dout {
				dout[i] = float32(rng.NormFloat64()) * 0.1
			}
			out, att, scratch := make([]float32, B*T*C), make([]float32, B*NH*T*T), make([]float32, B*T*C)
			wantOut, wantAtt := make([]float32, B*T*C), make([]float32, B*NH*T*T)
			m.attentionForward(out, att, qkv, scratch, B, T)
			loopAttentionForward(wantOut, wantAtt, qkv, B, T, C, NH, round)
			identicalBits(t, "y", out, wantOut)
			identicalBits(t, "att", att, wantAtt)

			dqkv, datt, wantD := make([]float32, B*T*3*C), make([]float32, B*NH*T*T), make([]float32, B*T*3*C)
			for i := range dqkv {
				dqkv[i], datt[i%len(datt)] = 7, 7 // overwritten, never read
			}
			m.attentionBackward(dqkv, datt, dout, qkv, att, scratch, B, T)
			loopAttentionBackward(wantD, dout, qkv, wantAtt, B, T, C, NH, round)
			identicalBits(t, "dqkv", dqkv, wantD)
		})
	}
}

func identicalBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, the loops give %v", what, i, got[i], want[i])
		}
	}
}
