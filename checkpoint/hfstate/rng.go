package hfstate

import (
	"fmt"
	"path/filepath"

	"github.com/dszero/dszero/ptfile"
)

// What dszero can truthfully say about random state. The Trainer's
// rng_state_R.pth holds Python's random.getstate(), NumPy's legacy
// get_state(), torch's CPU generator and every CUDA generator, and on
// resume sets each of them (random.setstate(state["python"]) ...: a file
// without those keys stops the resume with a KeyError). dszero draws from
// none of them: its randomness is splitmix64 from the run's seed, and a
// micro-batch is a pure function of (seed, step, micro, rank) (package
// data). So dszero writes no rng_state file — the Trainer resumes without
// one, saying reproducibility is not guaranteed, which is true of a run
// that was not the Trainer's — and keeps its own state, the seed and the
// step, in dszero_rng_state_R.pth:
//
//	{"dszero": {"generator": "splitmix64", "seed": SEED, "step": STEP}}

// DszeroRNGName is the file rank's dszero random state is saved in.
func DszeroRNGName(rank int) string { return fmt.Sprintf("dszero_rng_state_%d.pth", rank) }

// RNGState is dszero's random state: the run's seed and the step reached.
type RNGState struct {
	Seed uint64
	Step int64
}

// WriteRNG writes dir/dszero_rng_state_RANK.pth.
func WriteRNG(dir string, rank int, s RNGState) error {
	return ptfile.Write(join(dir, DszeroRNGName(rank)),
		ptfile.DictOf("dszero", ptfile.DictOf("generator", "splitmix64", "seed", s.Seed, "step", s.Step)))
}

// ReadRNG reads dir/dszero_rng_state_RANK.pth.
func ReadRNG(dir string, rank int) (RNGState, error) {
	path := join(dir, DszeroRNGName(rank))
	v, err := ptfile.Read(path, ptfile.Options{})
	if err != nil {
		return RNGState{}, fmt.Errorf("hfstate: %w", err)
	}
	gen, err1 := ptfile.Get[string](v, "dszero.generator")
	step, err2 := ptfile.Get[int64](v, "dszero.step")
	seed, err3 := ptfile.Lookup(v, "dszero.seed")
	if err1 != nil || err2 != nil || err3 != nil || gen != "splitmix64" {
		return RNGState{}, fmt.Errorf("hfstate: %s: not dszero's random state (want {\"dszero\": {\"generator\": \"splitmix64\", \"seed\", \"step\"}})", path)
	}
	s := RNGState{Step: step}
	switch x := seed.(type) {
	case int64:
		s.Seed = uint64(x)
	case interface{ Uint64() uint64 }: // a *big.Int above MaxInt64
		s.Seed = x.Uint64()
	default:
		return RNGState{}, fmt.Errorf("hfstate: %s: seed is a %s", path, ptfile.TypeName(seed))
	}
	return s, nil
}

func join(dir, name string) string { return filepath.Join(dir, name) }
