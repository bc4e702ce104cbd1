package strategytest_test

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/zero/strategytest"
)

const mlpRef = "../../model/mlp/testdata/"

func js(stage int, extra string) string {
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "weight_decay": 0.01}},
  "zero_optimization": {"stage": %d %s}}`, stage, extra)
}

// TestStrategies runs the conformance suite on every stage and its
// variants.
func TestStrategies(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, v := range []strategytest.Variant{
		{Name: "stage 0, 2 ranks", JSON: js(0, ""), World: 2},
		{Name: "stage 1, 2 ranks", JSON: js(1, ""), World: 2},
		{Name: "stage 1, 3 ranks", JSON: js(1, ""), World: 3},
		{Name: "stage 2, small buckets, overlap", JSON: js(2, `, "reduce_bucket_size": 500, "overlap_comm": true`), World: 2},
		{Name: "stage 2, offload cpu", JSON: js(2, `, "offload_optimizer": {"device": "cpu"}`), World: 2},
		{Name: "stage 3", JSON: js(3, `, "stage3_param_persistence_threshold": 0`), World: 2},
		{Name: "stage 3, sub-groups, prefetch", JSON: js(3, `, "sub_group_size": 1000, "stage3_prefetch_bucket_size": 2000`), World: 3},
		{Name: "stage 3, offload cpu both", JSON: js(3, `, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`), World: 2},
		{Name: "stage 3, nvme optimizer", JSON: js(3, `, "sub_group_size": 1000, "offload_optimizer": {"device": "nvme", "nvme_path": "/"}`), World: 2},
		{Name: "stage 3, MiCS shard 2 of 4", JSON: js(3, `, "mics_shard_size": 2`), World: 4},
	} {
		t.Run(v.Name, func(t *testing.T) { strategytest.Run(t, d, v) })
	}
}
