package model

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/dszero/dszero/internal/splitmix"
)

// Counter-based random initialisation.
//
// Element i of the flat buffer is drawn from a generator that depends only
// on (seed, i): splitmix64 evaluated at counters 2i and 2i+1 gives two
// uniforms, and Box–Muller turns them into one standard normal. A ZeRO
// stage-3 rank can therefore initialise only its partition [lo, hi) and
// get exactly the values a full initialisation would have put there.
//
// The values differ from torch.randn (PyTorch's Philox/MT streams are not
// reproduced); runs that must match PyTorch load the reference weights.

const golden = splitmix.Golden

func mix64(z uint64) uint64 { return splitmix.Mix(z) }

// uniformAt is a uniform in the open interval (0, 1) for counter n.
func uniformAt(key, n uint64) float64 {
	x := mix64(key + n*golden)
	return (float64(x>>11) + 0.5) * (1.0 / (1 << 53))
}

// streamKey turns a seed into the generator state at counter 0.
func streamKey(seed uint64) uint64 { return mix64(seed ^ 0x6a09e667f3bcc909) }

// NormalAt is the standard normal of element i under seed.
func NormalAt(seed, i uint64) float64 {
	key := streamKey(seed)
	u1 := uniformAt(key, 2*i)
	u2 := uniformAt(key, 2*i+1)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// UniformAt is the U(-1, 1) value of element i under seed.
func UniformAt(seed, i uint64) float64 {
	return 2*uniformAt(streamKey(seed), 2*i) - 1
}

// InitRange writes elements [lo, lo+len(dst)) of the initialised flat
// buffer into dst, following each tensor's Init rule. The result does not
// depend on how the buffer is cut into ranges, so large ranges are split
// over GOMAXPROCS goroutines.
func (l *Layout) InitRange(seed uint64, dst []float32, lo int) {
	hi := lo + len(dst)
	if lo < 0 || hi > l.Numel {
		panic(fmt.Sprintf("model: InitRange [%d, %d) outside the flat buffer of %d elements", lo, hi, l.Numel))
	}
	const grain = 1 << 20
	workers := min(runtime.GOMAXPROCS(0), (len(dst)+grain-1)/grain)
	if workers <= 1 {
		l.initRange(seed, dst, lo)
		return
	}
	var wg sync.WaitGroup
	per := (len(dst) + workers - 1) / workers
	for a := 0; a < len(dst); a += per {
		b := min(len(dst), a+per)
		wg.Go(func() { l.initRange(seed, dst[a:b], lo+a) })
	}
	wg.Wait()
}

func (l *Layout) initRange(seed uint64, dst []float32, lo int) {
	hi := lo + len(dst)
	key := streamKey(seed)
	for si := range l.Specs {
		s := &l.Specs[si]
		a, b := max(lo, s.Offset), min(hi, s.Offset+s.Numel)
		if a >= b {
			continue
		}
		out := dst[a-lo : b-lo]
		switch s.Init.Kind {
		case InitZeros:
			clear(out)
		case InitOnes:
			for j := range out {
				out[j] = 1
			}
		case InitNormal:
			for j := range out {
				i := uint64(a + j)
				u1 := uniformAt(key, 2*i)
				u2 := uniformAt(key, 2*i+1)
				out[j] = float32(s.Init.Scale * math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2))
			}
		case InitUniform:
			for j := range out {
				out[j] = float32(s.Init.Scale * (2*uniformAt(key, 2*uint64(a+j)) - 1))
			}
		default:
			panic(fmt.Sprintf("model: parameter %s has init kind %v", s.Name, s.Init.Kind))
		}
	}
}
