package checkpoint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
)

// TestParamGroupPythonTypes: the param group's numbers have the Python
// types DeepSpeed's optimizer holds. The expected types are those of
// torch 1.13.1's and DeepSpeed 0.14.5's signatures (torch.optim.Adam's
// weight_decay=0 is an int, AdamW's 1e-2 and FusedAdam's 0. are floats;
// SGD's momentum=0) and of json.load (0 an int, 0.0 a float); a scheduler
// writes lr as a float.
func TestParamGroupPythonTypes(t *testing.T) {
	const sched = `"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}},`
	for _, tc := range []struct {
		name, opt, extra string
		key              string
		want             string // "int" or "float"
	}{
		{"torch Adam default wd", `"Adam", "params": {"torch_adam": true, "adam_w_mode": false}`, "", "weight_decay", "int"},
		{"torch Adam wd 0.0", `"Adam", "params": {"torch_adam": true, "adam_w_mode": false, "weight_decay": 0.0}`, "", "weight_decay", "float"},
		{"torch Adam wd 0", `"Adam", "params": {"torch_adam": true, "adam_w_mode": false, "weight_decay": 0}`, "", "weight_decay", "int"},
		{"torch Adam wd 0e0", `"Adam", "params": {"torch_adam": true, "adam_w_mode": false, "weight_decay": 0e0}`, "", "weight_decay", "float"},
		{"torch AdamW default wd", `"AdamW", "params": {"torch_adam": true}`, "", "weight_decay", "float"},
		{"FusedAdam default wd", `"Adam", "params": {}`, "", "weight_decay", "float"},
		{"FusedAdam wd 0", `"Adam", "params": {"weight_decay": 0}`, "", "weight_decay", "int"},
		{"lr 1 no scheduler", `"Adam", "params": {"lr": 1}`, "", "lr", "int"},
		{"lr 1 with scheduler", `"Adam", "params": {"lr": 1}`, sched, "lr", "float"},
		{"SGD default momentum", `"SGD", "params": {"lr": 0.1}`, "", "momentum", "int"},
		{"SGD momentum 0.9", `"SGD", "params": {"lr": 0.1, "momentum": 0.9}`, "", "momentum", "float"},
		// HF's Trainer fills "auto" from its float arguments (weight_decay 0.0).
		{"torch Adam wd auto (HF)", `"Adam", "params": {"torch_adam": true, "adam_w_mode": false, "weight_decay": "auto"}`, "", "weight_decay", "float"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, %s "optimizer": {"type": %s}}`, tc.extra, tc.opt)
			opts := dsconfig.Options{WorldSize: 1}
			if strings.Contains(tc.name, "HF") {
				hf := dsconfig.DefaultHFArgs()
				hf.PerDeviceTrainBatchSize = 1
				opts.HF = &hf
			}
			plan, err := dsconfig.Load(js, opts)
			if err != nil {
				t.Fatal(err)
			}
			// The Go optimizers hold every number as a float64.
			o := zcore.OptimState{Group: map[string]any{tc.key: 0.0}}
			if tc.key == "lr" {
				o.Group[tc.key] = 1.0
			}
			v, _ := paramGroup(o, 1, groupTypes(plan)).Get(tc.key)
			got := fmt.Sprintf("%T", v)
			want := map[string]string{"int": "int64", "float": "float64"}[tc.want]
			if got != want {
				t.Errorf("%s = %v (%s), want a Python %s", tc.key, v, got, tc.want)
			}
		})
	}
}
