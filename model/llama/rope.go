package llama

import (
	"fmt"
	"math"
)

// Rotary position embedding (modeling_rope_utils.py, LlamaRotaryEmbedding,
// apply_rotary_pos_emb) in the half-split ("NeoX") layout: for a head of D
// values and each i < D/2, the pair (x[i], x[i+D/2]) is rotated by the
// angle pos·inv_freq[i]:
//
//	out[i]     = x[i]·cos − x[i+D/2]·sin
//	out[i+D/2] = x[i+D/2]·cos + x[i]·sin
//
// cos and sin are computed in float32 from the token's position id and
// multiplied by the attention scaling (1 except for yarn), as
// LlamaRotaryEmbedding.forward does with autocast off; a 16-bit model
// then casts them to its dtype. The inverse frequencies follow each
// rope_type's init function, operation by operation in float32 as torch
// evaluates them, so that they agree with transformers' to the last bit or
// two.

// InvFreq returns the D/2 inverse frequencies and the attention scaling
// of cos and sin for c's rotary embedding, as transformers computes them
// at model init (no sequence length: dynamic NTK equals default until
// positions pass max_position_embeddings). c must be valid.
func (c Config) InvFreq() (inv []float32, attentionScaling float64) {
	r, dim := c.Rope, c.HeadDim
	base := r.Theta
	// default: 1 / θ^(arange(0, dim, 2) / dim), every step in float32.
	powers := func(base float64) []float32 {
		b32 := float64(float32(base))
		out := make([]float32, dim/2)
		for i := range out {
			e := float32(2*i) / float32(dim)
			out[i] = float32(math.Pow(b32, float64(e)))
		}
		return out
	}
	reciprocal := func(x []float32) []float32 {
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = 1 / v
		}
		return out
	}
	switch r.Type {
	case RopeLinear:
		inv = reciprocal(powers(base))
		f := float32(r.Factor)
		for i := range inv {
			inv[i] /= f
		}
		return inv, 1
	case RopeDynamic:
		// θ·((factor·seq/max) − (factor − 1))^(dim/(dim−2)) at seq = max.
		seq, mx := float64(c.MaxPositions), float64(c.MaxPositions)
		b := base * math.Pow(r.Factor*seq/mx-(r.Factor-1), float64(dim)/float64(dim-2))
		return reciprocal(powers(b)), 1
	case RopeLlama3:
		return llama3InvFreq(reciprocal(powers(base)), r), 1
	case RopeYarn:
		return yarnInvFreq(powers(base), c)
	}
	return reciprocal(powers(base)), 1
}

// llama3InvFreq is _compute_llama3_parameters: wavelengths longer than
// old_ctx/low_freq_factor are divided by factor, shorter than
// old_ctx/high_freq_factor kept, and the band between interpolated by
// smooth = (old_ctx/wavelen − low)/(high − low).
func llama3InvFreq(inv []float32, r Rope) []float32 {
	old := float64(r.OriginalMaxPositions)
	lowWave := float32(old / r.LowFreqFactor)
	highWave := float32(old / r.HighFreqFactor)
	factor := float32(r.Factor)
	twoPi := float32(2 * math.Pi)
	oldf, lowf := float32(old), float32(r.LowFreqFactor)
	span := float32(r.HighFreqFactor - r.LowFreqFactor)
	out := make([]float32, len(inv))
	for i, f := range inv {
		wavelen := (1 / f) * twoPi // torch: scalar / tensor is reciprocal(tensor) * scalar
		scaled := f
		if wavelen > lowWave {
			scaled = f / factor
		}
		if wavelen < highWave || wavelen > lowWave {
			out[i] = scaled
			continue
		}
		smooth := ((1/wavelen)*oldf - lowf) / span
		out[i] = float32(float32(1-smooth)*scaled)/factor + float32(smooth*scaled)
	}
	return out
}

// yarnInvFreq is _compute_yarn_parameters (transformers 5): a linear ramp
// over the dimensions between the correction range of beta_fast and
// beta_slow rotations blends the interpolated frequencies 1/(factor·θ^e)
// into the extrapolated 1/θ^e, and cos and sin are scaled by the
// attention factor (default 0.1·ln(factor) + 1).
func yarnInvFreq(pos []float32, c Config) ([]float32, float64) {
	r, dim := c.Rope, c.HeadDim
	factor := r.Factor
	original := float64(c.MaxPositions)
	if r.OriginalMaxPositions > 0 {
		original = float64(r.OriginalMaxPositions)
		factor = float64(c.MaxPositions) / original
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	attn := r.AttentionFactor
	if attn == 0 {
		if r.Mscale != 0 && r.MscaleAllDim != 0 {
			attn = mscale(factor, r.Mscale) / mscale(factor, r.MscaleAllDim)
		} else {
			attn = mscale(factor, 1)
		}
	}
	betaFast, betaSlow := r.BetaFast, r.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(original/(rot*2*math.Pi)) / (2 * math.Log(r.Theta))
	}
	low, high := corr(betaFast), corr(betaSlow)
	if !r.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	low32, span32, f32 := float32(low), float32(high-low), float32(factor)
	inv := make([]float32, len(pos))
	for i, p := range pos {
		ramp := min(max((float32(i)-low32)/span32, 0), 1)
		extraFactor := 1 - ramp
		extra := 1 / p
		inter := 1 / float32(f32*p)
		inv[i] = float32(inter*(1-extraFactor)) + float32(extra*extraFactor)
	}
	return inv, attn
}

// ropeTables writes cos and sin (N, D/2) for the tokens' positions:
// float32(pos·inv_freq) in float32, its cos and sin, times the attention
// scaling when it is not 1, then rounded by round (the model's dtype).
func ropeTables(cos, sin, inv []float32, scaling float64, positions []int32, round func([]float32)) {
	h := len(inv)
	s32 := float32(scaling)
	for n, p := range positions {
		c, s := cos[n*h:][:h], sin[n*h:][:h]
		pf := float32(p)
		for i, f := range inv {
			a := float64(float32(f * pf))
			c[i], s[i] = float32(math.Cos(a)), float32(math.Sin(a))
			if scaling != 1 {
				c[i], s[i] = c[i]*s32, s[i]*s32
			}
		}
	}
	if round != nil {
		round(cos[:len(positions)*h])
		round(sin[:len(positions)*h])
	}
}

// ropeForward rotates x (N rows of heads·D, row stride ld) in place with
// the tables (N, D/2).
func ropeForward(x []float32, N, heads, D, ld int, cos, sin []float32) {
	h := D / 2
	for n := range N {
		c, s := cos[n*h:][:h], sin[n*h:][:h]
		row := x[n*ld:][:heads*D]
		for hd := range heads {
			a, b := row[hd*D:][:h], row[hd*D+h:][:h]
			for i := range a {
				x1, x2 := a[i], b[i]
				a[i] = float32(x1*c[i]) - float32(x2*s[i])
				b[i] = float32(x2*c[i]) + float32(x1*s[i])
			}
		}
	}
}

// ropeBackward turns dy into dx in place: the transpose of the rotation,
//
//	dx[i] = dy[i]·cos + dy[i+D/2]·sin,  dx[i+D/2] = dy[i+D/2]·cos − dy[i]·sin.
func ropeBackward(d []float32, N, heads, D, ld int, cos, sin []float32) {
	h := D / 2
	for n := range N {
		c, s := cos[n*h:][:h], sin[n*h:][:h]
		row := d[n*ld:][:heads*D]
		for hd := range heads {
			a, b := row[hd*D:][:h], row[hd*D+h:][:h]
			for i := range a {
				g1, g2 := a[i], b[i]
				a[i] = float32(g1*c[i]) + float32(g2*s[i])
				b[i] = float32(g2*c[i]) - float32(g1*s[i])
			}
		}
	}
}

// checkRopePositions reports a position the rotary embedding cannot take:
// dynamic NTK scaling recomputes θ once positions pass
// max_position_embeddings, an inference-time behaviour this training model
// does not implement.
func (c Config) checkRopePositions(maxPos int32) error {
	if c.Rope.Type == RopeDynamic && int(maxPos) >= c.MaxPositions {
		return fmt.Errorf("llama: position %d with rope_type dynamic: NTK scaling beyond max_position_embeddings %d is not implemented (within it, dynamic equals default)", maxPos, c.MaxPositions)
	}
	return nil
}
