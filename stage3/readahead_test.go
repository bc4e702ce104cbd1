package stage3_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestParamReadAheadMLP: through the engine, the MLP on 2 ranks with
// offload_param nvme and every parameter swapped (persistence 0) trains
// bit-identically — losses and final weights over 4 steps of 2
// micro-steps — whether the partitions are read ahead along the trace
// (buffer_count 5, the default) or each at its gather (buffer_count 1
// leaves no buffer to read ahead into), and as without offload; the
// buffer pool is the only parameter memory in the pinned-host tier.
func TestParamReadAheadMLP(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, k := range []knobs{variants()[2], variants()[5], variants()[7]} { // prefetch; prefetch, reuse and overlap; keep after forward
		t.Run(k.name, func(t *testing.T) {
			base := run(t, d, k.json(3, 2, 2), 2, k)
			for _, buffers := range []int{1, 5} {
				js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, fmt.Sprintf(`"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/", "buffer_count": %d},`, buffers), 1)
				plan, err := ztest.Plan(js, 2)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ztest.RunMLPWith(plan, 4, lrsched.DeepSpeed0195, d, nil, func(o *zero.Options) {
					o.SwapFS = nvme.NewMemFS(0)
					o.KeepAfterForward = k.keep
				})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Losses, base.Losses) || !slices.Equal(got.Final, base.Final) {
					t.Errorf("buffer_count %d: losses %v, final weights differ: %v; without offload %v", buffers, got.Losses, !slices.Equal(got.Final, base.Final), base.Losses)
				}
				largest := 0
				for _, sp := range d.Layout.Specs {
					largest = max(largest, (sp.Numel+1)/2)
				}
				pool := int64(buffers) * ((4*int64(largest) + 4095) / 4096 * 4096)
				if p := got.Accts[0].Snapshot().PeakBytes(mem.PinnedHost, mem.Params16); p != pool {
					t.Errorf("buffer_count %d: %d bytes of parameters in pinned host memory at the peak, want the pool's %d", buffers, p, pool)
				}
			}
		})
	}
}
