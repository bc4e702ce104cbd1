package stage3

import (
	"testing"
	"time"

	"github.com/dszero/dszero/nvme"
)

// BenchmarkParamReadAhead times a training step (one forward and backward
// over 8 units of a 64×64 weight and a bias, then the optimizer step) on
// one rank with offload_param nvme on a slow disk — every read of a
// partition sleeps 2ms — and a model that computes 1ms per unit hook,
// with the partitions read at their gathers and read ahead along the
// trace (buffer_count 5, prefetch bucket one unit), alternating step by
// step in the same run. It reports each one's ms/step and their ratio
// (speedup = on demand / read ahead).
func BenchmarkParamReadAhead(b *testing.B) {
	lay := chain(8, 64, 64)
	unit := 64*64 + 64
	rigs := make([]*rig, 2) // on demand, read ahead
	for k := range rigs {
		cfg := Config{PrefetchBucketSize: unit, MaxLiveParameters: 1 << 30, NoParamReadAhead: k == 0}
		fsys := nvme.NewFaultFS(memFS(b), nvme.Fault{Ops: nvme.OpRead, Path: "/params/param", Delay: 2 * time.Millisecond})
		r, err := newRig(&lay, nil, cfg, swapSetup{fsys: fsys, buffers: 5})
		if err != nil {
			b.Fatal(err)
		}
		defer r.s.Close()
		r.compute = time.Millisecond
		for range 2 { // the first step records the trace
			if err := r.trainStep(); err != nil {
				b.Fatal(err)
			}
		}
		r.s.TakeWaits()
		rigs[k] = r
	}
	var took [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for k, r := range rigs {
			t0 := time.Now()
			if err := r.trainStep(); err != nil {
				b.Fatal(err)
			}
			took[k] += time.Since(t0)
		}
	}
	b.StopTimer()
	w := rigs[1].s.TakeWaits()
	b.Logf("read ahead: %+v; on demand: %+v", w, rigs[0].s.TakeWaits())
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(took[0]), "ms/step-on-demand")
	b.ReportMetric(ms(took[1]), "ms/step-read-ahead")
	b.ReportMetric(float64(took[0])/float64(took[1]), "speedup")
	b.ReportMetric(float64(w.ReadsAhead)/float64(w.Reads), "ahead/read")
	b.ReportMetric(float64(w.ReadsReady)/float64(w.Reads), "ready/read")
}

// trainStep is one pass and the optimizer step.
func (r *rig) trainStep() error {
	if err := r.pass(); err != nil {
		return err
	}
	return r.step()
}
