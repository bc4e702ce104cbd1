package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero/partition"
)

// TestExportSyntheticGPT2XL writes a gpt2-xl-sized (1.56B parameters)
// ZeRO-3 checkpoint in DeepSpeed's layout over 8 ranks — fp32 master and
// Adam's two moments, about 19 GB — into $DSZERO_XL_DIR (kept, for
// measuring `dszero export` on it with /usr/bin/time), exports it and
// checks elements of every parameter. Training a model this size does not
// fit this machine's memory; the files are what DeepSpeed would write.
// Skipped without the variable.
func TestExportSyntheticGPT2XL(t *testing.T) {
	dir := os.Getenv("DSZERO_XL_DIR")
	if dir == "" {
		t.Skip("set DSZERO_XL_DIR to a directory with 20 GB free")
	}
	cfg, err := gpt.Preset("gpt2-xl")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Layout()
	const world = 8
	// The value of element k of parameter i: exact in float32.
	value := func(i, k int) float32 { return float32(i) + float32(k%4096)/4096 }
	if _, err := os.Stat(filepath.Join(dir, "latest")); err != nil {
		writeSyntheticZ3(t, dir, &l, world, value)
	}
	out := filepath.Join(t.TempDir(), "model.safetensors")
	st, err := checkpoint.Export(dir, out, checkpoint.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Stage != 3 || st.World != world || st.Elements != int64(l.Numel) {
		t.Fatalf("stats %+v", st)
	}
	f, err := model.OpenSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, sp := range l.Specs {
		got := make([]float32, sp.Numel)
		if err := f.ReadFloat32(sp.Name, got); err != nil {
			t.Fatal(err)
		}
		for _, k := range []int{0, sp.Numel / 2, sp.Numel - 1} {
			if got[k] != value(i, k) {
				t.Fatalf("%s[%d] = %v, want %v", sp.Name, k, got[k], value(i, k))
			}
		}
	}
	t.Logf("%+v", st)
}

// writeSyntheticZ3 writes dir/global_step1 as DeepSpeed 0.14.5 would for
// a ZeRO-3 run of l over world ranks with one sub-group: each rank's
// model states (placeholders and param_shapes) and optimizer states
// (fp32_flat_groups and Adam's moments over the rank's padded partitions).
func writeSyntheticZ3(t *testing.T, dir string, l *model.Layout, world int, value func(i, k int) float32) {
	t.Helper()
	tag := filepath.Join(dir, "global_step1")
	if err := os.MkdirAll(tag, 0o755); err != nil {
		t.Fatal(err)
	}
	shapes := ptfile.NewOrderedDict()
	module := ptfile.NewOrderedDict()
	for _, sp := range l.Specs {
		s := make(ptfile.Size, len(sp.Shape))
		for j, x := range sp.Shape {
			s[j] = int64(x)
		}
		shapes.Set(sp.Name, s)
		module.Set(sp.Name, ptfile.FromFloat32([]int64{0}, nil))
	}
	for r := range world {
		n := 0
		for _, sp := range l.Specs {
			n += partition.ParamPartitionSize(sp.Numel, world)
		}
		master := make([]float32, n)
		at := 0
		for i, sp := range l.Specs {
			lo, hi, pad := partition.PerParam(sp.Numel, world, r)
			for k := lo; k < hi; k++ {
				master[at+k-lo] = value(i, k)
			}
			at += hi - lo + pad
		}
		zeros := make([]float32, n)
		state := ptfile.DictOf("step", int64(1), "exp_avg", ptfile.FromFloat32([]int64{int64(n)}, zeros), "exp_avg_sq", ptfile.FromFloat32([]int64{int64(n)}, zeros))
		group := ptfile.DictOf("lr", 1e-3, "betas", ptfile.List{0.9, 0.999}, "eps", 1e-8, "weight_decay", 0.01, "amsgrad", false, "params", ptfile.List{int64(0)})
		osd := ptfile.DictOf(
			"zero_stage", &ptfile.Object{Module: "deepspeed.runtime.zero.config", Name: "ZeroStageEnum", Kind: ptfile.EnumMember, Attr: "weights"},
			"loss_scaler", &ptfile.Object{Module: "deepspeed.runtime.fp16.loss_scaler", Name: "LossScaler", Kind: ptfile.NewObject, Args: ptfile.Tuple{}, State: ptfile.DictOf("cur_scale", 1.0, "dynamic", false)},
			"dynamic_loss_scale", false, "overflow", false, "partition_count", int64(world),
			"optimizer_state_dict", ptfile.DictOf("state", ptfile.DictOf(int64(0), state), "param_groups", ptfile.List{group}),
			"fp32_flat_groups", ptfile.List{ptfile.FromFloat32([]int64{int64(n)}, master)})
		if err := ptfile.Write(filepath.Join(tag, fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_optim_states.pt", r)),
			ptfile.DictOf("optimizer_state_dict", osd, "ds_config", ptfile.DictOf(), "ds_version", "0.14.5")); err != nil {
			t.Fatal(err)
		}
		ms := ptfile.DictOf("module", module, "buffer_names", ptfile.List{}, "optimizer", nil, "param_shapes", ptfile.List{shapes},
			"lr_scheduler", nil, "skipped_steps", int64(0), "global_steps", int64(1), "global_samples", int64(world),
			"dp_world_size", int64(world), "mp_world_size", int64(1), "ds_config", ptfile.DictOf(), "ds_version", "0.14.5")
		if err := ptfile.Write(filepath.Join(tag, fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_model_states.pt", r)), ms); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "latest"), []byte("global_step1"), 0o644); err != nil {
		t.Fatal(err)
	}
}
