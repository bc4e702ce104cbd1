package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/checkpoint/dcp"
	"github.com/dszero/dszero/checkpoint/hfstate"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/ptfile"
)

// TestShardedStateDict: SaveSharded writes Accelerate's SHARDED_STATE_DICT
// from every stage — a torch.distributed.checkpoint whose model state dict
// is the fp32 master under each parameter's name and shape, and whose
// optimizer state dict holds every parameter's moments and step — and
// LoadSharded reads it at another stage and world size: the master and
// the optimizer state come back bit for bit (checked against the same
// run's DeepSpeed-layout checkpoint, both loaded whole on one rank), and a
// run resumed from it at the layout that saved it continues bit for bit.
func TestShardedStateDict(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	const n, more = 2, 2
	for _, tc := range []struct{ fromStage, fromWorld, toStage, toWorld int }{
		{3, 2, 1, 3}, {2, 2, 3, 3}, {0, 2, 3, 2}, {1, 3, 0, 1},
	} {
		t.Run(fmt.Sprintf("z%d_w%d_to_z%d_w%d", tc.fromStage, tc.fromWorld, tc.toStage, tc.toWorld), func(t *testing.T) {
			plan := func(stage, world int) dsconfig.Plan {
				p, err := ztest.Plan(stageJSON(stage, "fp32", 0), world)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			from, to, canon := plan(tc.fromStage, tc.fromWorld), plan(tc.toStage, tc.toWorld), plan(0, 1)
			sharded, deepspeed := t.TempDir(), t.TempDir()
			run := func(r mlpRun, p dsconfig.Plan) result {
				t.Helper()
				res, err := r.run(p, d)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			whole := run(mlpRun{from: 0, to: n + more, dir: deepspeed, saveAt: []int{n}}, from)
			saved := run(mlpRun{from: 0, to: n, dir: sharded, saveAt: []int{n}, format: "sharded"}, from)

			c, err := dcp.Open(filepath.Join(sharded, hfstate.ModelDir(0)))
			if err != nil {
				t.Fatal(err)
			}
			sd, err := c.StateDict(ptfile.Options{})
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range d.Layout.Specs {
				v, err := ptfile.Lookup(sd, hfstate.ModelKey)
				if err != nil {
					t.Fatal(err)
				}
				x, _ := v.(*ptfile.Dict).Get(sp.Name)
				tt, ok := x.(*ptfile.Tensor)
				if !ok || fmt.Sprint(tt.Shape) != fmt.Sprint(shape64(sp.Shape)) {
					t.Fatalf("model.%s: %v, want a tensor of shape %v", sp.Name, x, sp.Shape)
				}
				f, _ := tt.Float32s()
				if i := bitsEqual(f, saved.final[sp.Offset:sp.Offset+sp.Numel]); i >= 0 {
					t.Fatalf("model.%s element %d is not the saved master", sp.Name, i)
				}
			}
			if ents, _ := os.ReadDir(sharded); len(ents) != 3 {
				t.Errorf("%s holds %d entries, want pytorch_model_fsdp_0, optimizer_0, %s", sharded, len(ents), checkpoint.EngineStateName)
			}

			loaded := run(mlpRun{from: n, to: n, dir: sharded, load: true, format: "sharded"}, to)
			if i := bitsEqual(loaded.final, saved.final); i >= 0 {
				t.Fatalf("element %d of the master loaded at stage %d on %d ranks differs from the saved one", i, tc.toStage, tc.toWorld)
			}
			a := run(mlpRun{from: n, to: n, dir: sharded, load: true, format: "sharded"}, canon).states[0].Strategy.Groups[0]
			b := run(mlpRun{from: n, to: n, dir: deepspeed, load: true}, canon).states[0].Strategy.Groups[0]
			if len(b.Optim.State) != 2 || a.Optim.Steps != b.Optim.Steps {
				t.Fatalf("optimizer state: %d tensors, steps %d and %d", len(b.Optim.State), a.Optim.Steps, b.Optim.Steps)
			}
			for name, v := range b.Optim.State {
				if i := bitsEqual(a.Optim.State[name], v); i >= 0 {
					t.Errorf("optimizer state %s element %d differs from DeepSpeed's layout of the same state", name, i)
				}
			}

			resumed := run(mlpRun{from: n, to: n + more, dir: sharded, load: true, format: "sharded"}, from)
			for i, l := range resumed.losses {
				if l != whole.losses[n+i] {
					t.Errorf("step %d after resuming: loss %v, the uninterrupted run's %v", n+i+1, l, whole.losses[n+i])
				}
			}
			if i := bitsEqual(resumed.final, whole.final); i >= 0 {
				t.Errorf("element %d of the resumed run's final master differs from the uninterrupted run's", i)
			}
		})
	}
}

// TestShardedStateDictErrors: a sharded checkpoint of another model, or
// with a missing shard file, is refused naming the file and the fix.
func TestShardedStateDictErrors(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	p, err := ztest.Plan(stageJSON(3, "fp32", 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := (mlpRun{from: 0, to: 1, dir: dir, saveAt: []int{1}, format: "sharded"}).run(p, d); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, hfstate.ModelDir(0), dcp.FileName(1))); err != nil {
		t.Fatal(err)
	}
	_, err = (mlpRun{from: 1, to: 1, dir: dir, load: true, format: "sharded"}).run(p, d)
	if err == nil || !strings.Contains(err.Error(), dcp.FileName(1)) {
		t.Errorf("a missing shard file: %v", err)
	}
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, x := range s {
		out[i] = int64(x)
	}
	return out
}

// TestFullStateDict: SaveFull writes Accelerate's FULL_STATE_DICT files —
// pytorch_model_fsdp.bin, the master under each name, and optimizer.bin,
// torch AdamW's state dict keyed by name — and LoadFull reads them at
// another stage and world size bit for bit; a resume at the saving
// layout continues bit for bit.
func TestFullStateDict(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	const n, more = 2, 2
	for _, tc := range []struct{ fromStage, fromWorld, toStage, toWorld int }{{3, 2, 2, 3}, {1, 2, 3, 1}} {
		t.Run(fmt.Sprintf("z%d_w%d_to_z%d_w%d", tc.fromStage, tc.fromWorld, tc.toStage, tc.toWorld), func(t *testing.T) {
			plan := func(stage, world int) dsconfig.Plan {
				p, err := ztest.Plan(stageJSON(stage, "fp32", 0), world)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			run := func(r mlpRun, p dsconfig.Plan) result {
				t.Helper()
				res, err := r.run(p, d)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			from, to := plan(tc.fromStage, tc.fromWorld), plan(tc.toStage, tc.toWorld)
			full, deepspeed := t.TempDir(), t.TempDir()
			whole := run(mlpRun{from: 0, to: n + more, dir: deepspeed, saveAt: []int{n}}, from)
			saved := run(mlpRun{from: 0, to: n, dir: full, saveAt: []int{n}, format: "full"}, from)
			ents, _ := os.ReadDir(full)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if fmt.Sprint(names) != fmt.Sprint([]string{checkpoint.EngineStateName, "optimizer.bin", "pytorch_model_fsdp.bin"}) {
				t.Errorf("%s holds %v", full, names)
			}
			v, err := ptfile.Read(filepath.Join(full, "pytorch_model_fsdp.bin"), ptfile.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sp := range d.Layout.Specs {
				x, _ := v.(*ptfile.Dict).Get(sp.Name)
				tt, ok := x.(*ptfile.Tensor)
				if !ok {
					t.Fatalf("%s: %v", sp.Name, x)
				}
				f, _ := tt.Float32s()
				if i := bitsEqual(f, saved.final[sp.Offset:sp.Offset+sp.Numel]); i >= 0 {
					t.Fatalf("%s element %d is not the saved master", sp.Name, i)
				}
			}
			o, err := ptfile.Read(filepath.Join(full, "optimizer.bin"), ptfile.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ptfile.Lookup(o, "param_groups"); err != nil {
				t.Errorf("optimizer.bin: %v", err)
			}
			loaded := run(mlpRun{from: n, to: n, dir: full, load: true, format: "full"}, to)
			if i := bitsEqual(loaded.final, saved.final); i >= 0 {
				t.Fatalf("element %d of the loaded master differs from the saved one", i)
			}
			canon := plan(0, 1)
			a := run(mlpRun{from: n, to: n, dir: full, load: true, format: "full"}, canon).states[0].Strategy.Groups[0]
			b := run(mlpRun{from: n, to: n, dir: deepspeed, load: true}, canon).states[0].Strategy.Groups[0]
			for name, v := range b.Optim.State {
				if i := bitsEqual(a.Optim.State[name], v); i >= 0 {
					t.Errorf("optimizer state %s element %d differs from DeepSpeed's layout of the same state", name, i)
				}
			}
			resumed := run(mlpRun{from: n, to: n + more, dir: full, load: true, format: "full"}, from)
			for i, l := range resumed.losses {
				if l != whole.losses[n+i] {
					t.Errorf("step %d after resuming: loss %v, the uninterrupted run's %v", n+i+1, l, whole.losses[n+i])
				}
			}
		})
	}
}
