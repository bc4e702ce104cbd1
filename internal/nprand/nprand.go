// Package nprand is numpy's legacy global generator, np.random.seed and
// np.random.random_sample / np.random.choice(a, p=...) of numpy's
// RandomState (numpy/random/mtrand.pyx, src/mt19937): the generator
// DeepSpeed's example models draw their stochastic choices from, so that
// dszero can draw the same numbers from the same seed.
//
// The state is MT19937 seeded by init_genrand (a 32-bit integer seed, as
// np.random.seed(int) does); random_sample is
//
//	(a·2^26 + b) / 2^53,  a = next32 >> 5,  b = next32 >> 6
//
// and choice over two items with probabilities (q, 1−q) draws one
// random_sample u and returns the first index whose normalised cumulative
// sum exceeds u (cdf = cumsum(p); cdf /= cdf[-1]; searchsorted(cdf, u,
// side="right")).
package nprand

const n, m = 624, 397

// RandomState is one numpy RandomState (MT19937).
type RandomState struct {
	key [n]uint32
	pos int
}

// New is np.random.seed(seed): init_genrand.
func New(seed uint32) *RandomState {
	r := &RandomState{}
	r.Seed(seed)
	return r
}

// Seed re-seeds the state as np.random.seed(seed).
func (r *RandomState) Seed(seed uint32) {
	for i := range r.key {
		r.key[i] = seed
		seed = 1812433253*(seed^(seed>>30)) + uint32(i) + 1
	}
	r.pos = n
}

// gen refills the state (mt19937_gen).
func (r *RandomState) gen() {
	const upper, lower, matrixA = 0x80000000, 0x7fffffff, 0x9908b0df
	k := &r.key
	for i := 0; i < n; i++ {
		y := (k[i] & upper) | (k[(i+1)%n] & lower)
		v := k[(i+m)%n] ^ (y >> 1)
		if y&1 != 0 {
			v ^= matrixA
		}
		k[i] = v
	}
	r.pos = 0
}

// Uint32 is mt19937_next32: the next tempered output.
func (r *RandomState) Uint32() uint32 {
	if r.pos == n {
		r.gen()
	}
	y := r.key[r.pos]
	r.pos++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// RandomSample is np.random.random_sample(): a double in [0, 1) from two
// 32-bit outputs.
func (r *RandomState) RandomSample() float64 {
	a, b := r.Uint32()>>5, r.Uint32()>>6
	return (float64(a)*67108864.0 + float64(b)) / 9007199254740992.0
}

// ChooseFirst is np.random.choice([x, y], p=[q, 1−q]) == x: it draws one
// random_sample u and reports u < q / (q + (1−q)), numpy's normalised
// cumulative probability of the first item. q must be in [0, 1] (numpy
// refuses negative probabilities).
func (r *RandomState) ChooseFirst(q float64) bool {
	total := q + (1 - q) // cdf[-1], cumsum in float64
	return r.RandomSample() < q/total
}
