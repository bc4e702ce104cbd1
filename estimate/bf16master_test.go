package estimate

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig"
)

// TestBF16MasterBytes: Ψ = 1000 parameters on 2 ranks at stage 2 with the
// optimizer offloaded to the CPU: the flat buffer is 1000 elements, 500 a
// partition. In fp32 the host holds the gradient partition (500 × 4 B),
// the master (500 × 4 B) and Adam's two moments (1000 × 4 B): 8000 B.
// DeepSpeed's bf16_master_weights_and_grads halves the first two (6000 B);
// bf16_optimizer_states the moments too (4000 B). The device keeps the
// 1000-element working buffer either way.
func TestBF16MasterBytes(t *testing.T) {
	for _, c := range []struct {
		bf16    string
		host    int64
		inNote  string
		without bool
	}{
		{``, 8000, "", true},
		{`, "bf16_master_weights_and_grads": true`, 6000, "the master partition (500 elements) and its gradient partition (500) in bf16", false},
		{`, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true`, 4000, "and the optimizer state (1,000)", false},
		// fp16_master_weights_and_grads: the same two halved, fp32 moments.
		{`}, "fp16": {"fp16_master_weights_and_grads": true`, 6000, "fp16_master_weights_and_grads: DeepSpeed keeps the master partition (500 elements) and its gradient partition (500) in fp16", false},
	} {
		js := `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": true` + c.bf16 + `}}`
		plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(Input{Params: 1000, Hardware: Hardware{GPUsPerNode: 2, Nodes: 1, BufferFactor: DefaultBufferFactor}, Plan: &plan})
		if err != nil {
			t.Fatal(err)
		}
		e := r.Dszero
		if fp32 := e.Stages[2].StatesTotal; fp32.PinnedHost != 8000 || fp32.Device != 4000 {
			t.Errorf("%s: dszero's fp32 table %+v, want 8000 B on the host and 4000 on the device", c.bf16, fp32)
		}
		if c.without {
			if e.BF16MasterStates != (Tiers{}) {
				t.Errorf("no key: %+v", e.BF16MasterStates)
			}
			continue
		}
		if got := e.BF16MasterStates; got.PinnedHost != c.host || got.Device != 4000 {
			t.Errorf("%s: DeepSpeed's bf16 widths %+v, want %d B on the host, 4000 on the device", c.bf16, got, c.host)
		}
		if note := strings.Join(e.Notes, "\n"); !strings.Contains(note, c.inNote) {
			t.Errorf("%s: notes %q lack %q", c.bf16, note, c.inNote)
		}
	}
}
