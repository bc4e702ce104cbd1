package stage3_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/partition"
	"github.com/google/go-cmp/cmp"
)

// partialJSON is the MLP at stage 3 on 2 ranks with sub_group_size 500:
// per rank the partitions are fc1.w 512, fc1.b 32, fc2.w 2048, fc2.b 32,
// fc3.w 256, fc3.b 4 elements, so the sub-groups are {fc1.w} 512,
// {fc1.b, fc2.w} 2080 and {fc2.b, fc3.w, fc3.b} 292 elements. opt is the
// optimizer's params, zo more zero_optimization keys, top more top-level
// keys.
func partialJSON(opt, zo, top string) string {
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0, %s
  "optimizer": {"type": "AdamW", "params": {%s"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "zero_optimization": {"stage": 3, %s "stage3_param_persistence_threshold": 0, "sub_group_size": 500}
}`, top, opt, zo)
}

func runPartial(t *testing.T, js string, steps int, v zero.Version) ztest.Run {
	t.Helper()
	plan, err := ztest.Plan(js, 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ztest.RunMLPWith(plan, steps, v, ztest.MustLoadMLP(t, mlpRef), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ratioJSON(r float64) string {
	return fmt.Sprintf(`"offload_optimizer": {"device": "cpu", "ratio": %g},`, r)
}

// TestPartialOffload runs offload_optimizer.ratio as DeepSpeed does: the
// host sub-groups are stepped by DeepSpeedCPUAdam, the device ones by the
// backup torch.optim.AdamW. So, bit for bit (losses and final weights, 4
// steps):
//   - ratio 1 is full cpu offload, and both are stage 3 without offload
//     (FusedAdam and DeepSpeedCPUAdam share their arithmetic);
//   - ratio 0 is stage 3 without offload with torch.optim.AdamW, and a
//     scheduler does not reach it (the backup keeps the optimizer block's
//     lr), with a warning saying so;
//   - ratio 0.5 after one step: the host sub-groups' parameters are those
//     of full offload and the device ones those of torch AdamW — the host
//     sub-group being {fc1.w} under DeepSpeed 0.14.5 (int(0.5·3) = 1, the
//     first) and {fc1.b, fc2.w}, {fc2.b, fc3.w, fc3.b} under 0.19.5
//     (3 − int(1.5) = 2, the last).
//
// And each rank holds exactly its device sub-groups' master (4 bytes an
// element), gradients (4) and Adam moments (8) on the device, the rest on
// the pinned host.
func TestPartialOffload(t *testing.T) {
	const steps = 4
	same := func(name string, got, want ztest.Run) {
		t.Helper()
		if !slices.Equal(got.Losses, want.Losses) || !slices.Equal(got.Final, want.Final) {
			abs, _ := fdiff.Weights(got.Final, want.Final)
			t.Errorf("%s: losses %v vs %v, weights differ by up to %.2e", name, got.Losses, want.Losses, abs)
		}
	}
	fused := runPartial(t, partialJSON("", "", ""), steps, lrsched.DeepSpeed0195)
	full := runPartial(t, partialJSON("", `"offload_optimizer": {"device": "cpu"},`, ""), steps, lrsched.DeepSpeed0195)
	torch := runPartial(t, partialJSON(`"torch_adam": true, `, "", ""), steps, lrsched.DeepSpeed0195)
	same("full offload vs none", full, fused)
	if slices.Equal(torch.Final, fused.Final) {
		t.Fatal("torch AdamW and DeepSpeed's Adam end on the same weights: the test cannot tell them apart")
	}
	for _, v := range []zero.Version{lrsched.DeepSpeed0145, lrsched.DeepSpeed0195} {
		same(fmt.Sprintf("%v ratio 1 vs full offload", v), runPartial(t, partialJSON("", ratioJSON(1), ""), steps, v), full)
		same(fmt.Sprintf("%v ratio 0 vs torch AdamW", v), runPartial(t, partialJSON("", ratioJSON(0), ""), steps, v), torch)
	}
	sched := `"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},`
	got := runPartial(t, partialJSON("", ratioJSON(0), sched), steps, lrsched.DeepSpeed0195)
	same("ratio 0 with WarmupLR vs torch AdamW without", got, torch)
	if len(got.Warns) != 1 || !strings.Contains(got.Warns[0], "WarmupLR does not reach them") {
		t.Errorf("warnings %q, want one about the scheduler", got.Warns)
	}

	d := ztest.MustLoadMLP(t, mlpRef)
	full1 := runPartial(t, partialJSON("", `"offload_optimizer": {"device": "cpu"},`, ""), 1, lrsched.DeepSpeed0195)
	torch1 := runPartial(t, partialJSON(`"torch_adam": true, `, "", ""), 1, lrsched.DeepSpeed0195)
	groups := [][]string{{"fc1.weight"}, {"fc1.bias", "fc2.weight"}, {"fc2.bias", "fc3.weight", "fc3.bias"}}
	sizes := []int64{512, 2080, 292}
	for _, tc := range []struct {
		v    zero.Version
		host []int
	}{{lrsched.DeepSpeed0145, []int{0}}, {lrsched.DeepSpeed0195, []int{1, 2}}} {
		got := runPartial(t, partialJSON("", ratioJSON(0.5), ""), 1, tc.v)
		var host, dev int64
		for g, names := range groups {
			want := torch1
			if slices.Contains(tc.host, g) {
				want, host = full1, host+sizes[g]
			} else {
				dev += sizes[g]
			}
			for _, name := range names {
				i := slices.IndexFunc(d.Layout.Specs, func(sp model.ParamSpec) bool { return sp.Name == name })
				sp := d.Layout.Specs[i]
				if !slices.Equal(got.Final[sp.Offset:sp.Offset+sp.Numel], want.Final[sp.Offset:sp.Offset+sp.Numel]) {
					t.Errorf("%v ratio 0.5: %s (sub-group %d, on the host: %v) differs from that run", tc.v, name, g, slices.Contains(tc.host, g))
				}
			}
		}
		for r, a := range got.Accts {
			s := a.Snapshot()
			gotB := map[string]int64{}
			for _, c := range []mem.Category{mem.MasterParams, mem.Grads, mem.OptimState} {
				for _, tr := range []mem.Tier{mem.Device, mem.PinnedHost} {
					gotB[c.String()+"/"+tr.String()] = s.PeakBytes(tr, c)
				}
			}
			want := map[string]int64{"master_params/device": 4 * dev, "master_params/pinned_host": 4 * host,
				"grads/device": 4 * dev, "grads/pinned_host": 4 * host, "optim_state/device": 8 * dev, "optim_state/pinned_host": 8 * host}
			if d := cmp.Diff(want, gotB); d != "" {
				t.Errorf("%v ratio 0.5 rank %d: peak bytes (-want +got)\n%s", tc.v, r, d)
			}
		}
	}
	// The sub-groups are what the comment says.
	lay := partition.Stage3(params(d), 2, 500)
	var gotSizes []int64
	for g := range lay.SubGroups {
		gotSizes = append(gotSizes, int64(lay.SubGroupNumel(g)))
	}
	if !slices.Equal(gotSizes, sizes) {
		t.Errorf("sub-groups of %v elements, the test assumes %v", gotSizes, sizes)
	}
}
