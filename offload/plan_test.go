package offload_test

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/offload"
)

// TestSwappers: the plan's NVMe blocks give a swapper constructor each
// (none for a tier not on NVMe), with the files under nvme_path, and an
// offload_param.buffer_size smaller than the largest partition is
// refused naming the key and the fix.
func TestSwappers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		optim, params string
		wantO, wantP  bool
	}{
		{"none", `"cpu"`, `"none"`, false, false},
		{"optimizer", `"nvme", "nvme_path": "/nvme"`, `"cpu"`, true, false},
		{"both", `"nvme", "nvme_path": "/nvme"`, `"nvme", "nvme_path": "/nvme", "buffer_size": 100`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
				"zero_optimization": {"stage": 3, "offload_optimizer": {"device": ` + tc.optim + `}, "offload_param": {"device": ` + tc.params + `}}}`
			plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			acct := mem.NewAccountant(1)
			fsys := memFS(t)
			o, p := offload.Swappers(plan, 1, fsys, acct)
			if (o != nil) != tc.wantO || (p != nil) != tc.wantP {
				t.Fatalf("optimizer, params swappers made: %v, %v; want %v, %v", o != nil, p != nil, tc.wantO, tc.wantP)
			}
			if o != nil {
				sw, err := o(4096, 1<<16)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(sw.Path("x"), "/nvme/dszero_rank1") {
					t.Errorf("optimizer swap file %s, want one under /nvme/dszero_rank1", sw.Path("x"))
				}
				sw.Close()
			}
			if p != nil {
				if _, err := p(4*101, 1<<12); err == nil || !strings.Contains(err.Error(), "offload_param.buffer_size 100 elements") || !strings.Contains(err.Error(), "101 elements") {
					t.Errorf("a partition of 101 elements in buffers of 100: error %v, want one naming buffer_size", err)
				}
				sw, err := p(4*100, 1<<12)
				if err != nil {
					t.Fatal(err)
				}
				if got := sw.BufferBytes(); got < 400 {
					t.Errorf("parameter buffers of %d bytes, want at least the largest partition's 400", got)
				}
				sw.Close()
			}
			checkEmpty(t, acct)
		})
	}
}
