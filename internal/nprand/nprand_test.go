package nprand

import "testing"

// The expected values are numpy 1.24.2's (Debian's python3-numpy):
//
//	np.random.seed(0); np.random.random_sample(3)
//	np.random.seed(4294967295); np.random.random_sample(2)
//	np.random.seed(7); np.random.random_sample(700)[-1]   (past one refill)
func TestRandomSampleMatchesNumpy(t *testing.T) {
	for _, c := range []struct {
		seed uint32
		skip int
		want []float64
	}{
		{0, 0, []float64{0.5488135039273248, 0.7151893663724195, 0.6027633760716439}},
		{4294967295, 0, []float64{0.0976320289940138, 0.9123828453026218}},
		{7, 699, []float64{0.33871568992326884}},
	} {
		r := New(c.seed)
		for i := 0; i < c.skip; i++ {
			r.RandomSample()
		}
		for i, w := range c.want {
			if got := r.RandomSample(); got != w {
				t.Errorf("seed %d draw %d: %v, want numpy's %v", c.seed, c.skip+i, got, w)
			}
		}
	}
}

// DeepSpeedExamples' PLD encoder (bing_bert modelingpreln_layerdrop.py)
// for theta 0.3 and 4 layers, 6 forwards, after np.random.seed(7):
//
//	p = 1.0; step = (1 - theta) / 4
//	for each layer: action = np.random.choice([1, 0], p=[p, 1 - p]); p -= step
//
// numpy 1.24.2 prints the actions 111011111100111011011010.
func TestChooseFirstMatchesNumpysChoice(t *testing.T) {
	const want = "111011111100111011011010"
	r := New(7)
	got := ""
	for f := 0; f < 6; f++ {
		p, step := 1.0, (1-0.3)/4
		for i := 0; i < 4; i++ {
			if r.ChooseFirst(p) {
				got += "1"
			} else {
				got += "0"
			}
			p -= step
		}
	}
	if got != want {
		t.Errorf("actions %s, want numpy's %s", got, want)
	}
}
