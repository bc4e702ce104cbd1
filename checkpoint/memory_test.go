package checkpoint_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// saveBound is the target for a save's extra memory per rank:
// 64 MiB plus the writer's I/O buffer, whatever the model's size.
func saveBound(o ptfile.WriteOptions) int64 { return 64<<20 + ptfile.ScratchBytes(o) }

// bigLayout is a model of units (rows, cols) weights, one a unit.
func bigLayout(units, rows, cols int) model.Layout { return biasedLayout(units, rows, cols, 0) }

// biasedLayout is bigLayout with a bias of n elements after the last
// unit's weight when n > 0.
func biasedLayout(units, rows, cols, n int) model.Layout {
	var b model.LayoutBuilder
	for u := range units {
		b.Unit(fmt.Sprintf("h.%d", u))
		b.Param(fmt.Sprintf("h.%d.weight", u), model.Init{}, rows, cols)
	}
	if n > 0 {
		b.Param(fmt.Sprintf("h.%d.bias", units-1), model.Init{}, n)
	}
	return b.Build()
}

// bigRanks builds world in-process engines of plan over l, each holding
// Adam's moments as after a step (imported, when fill is set: a step
// needs a model's backward), and calls each(rank, engine, comm,
// accountant) on every rank.
func bigRanks(plan dsconfig.Plan, l *model.Layout, fill bool, each func(r int, eng *zero.Engine, c comm.Comm, a *mem.Accountant) error) error {
	return bigRanksOn(plan, l, nil, fill, each)
}

// bigRanksOn is bigRanks with swap files in swap (one filesystem a rank)
// when it is not nil.
func bigRanksOn(plan dsconfig.Plan, l *model.Layout, swap []nvme.FS, fill bool, each func(r int, eng *zero.Engine, c comm.Comm, a *mem.Accountant) error) error {
	init := make([]float32, l.Numel)
	for i := range init {
		init[i] = float32(i%1000) / 1000
	}
	return inproc.New(plan.WorldSize, inproc.Options{Timeout: 5 * time.Minute}).Run(func(c comm.Comm) error {
		r := c.Rank()
		acct := mem.NewAccountant(r)
		o := zero.Options{Acct: acct, Layout: l, Init: init, Workers: 1, Comm: c, Ctx: context.Background()}
		if swap != nil {
			o.SwapFS = swap[r]
		}
		eng, err := zero.NewEngine(plan, o)
		if err != nil {
			return err
		}
		defer eng.Close()
		if !fill {
			return each(r, eng, c, acct)
		}
		st, err := eng.ExportState()
		if err != nil {
			return err
		}
		for g := range st.Strategy.Groups {
			gs := &st.Strategy.Groups[g]
			gs.Optim.Steps = 1
			for k, n := range []string{"exp_avg", "exp_avg_sq"} {
				v := make([]float32, len(gs.Master))
				for i := range v {
					v[i] = moment(k, i)
				}
				gs.Optim.State[n] = v
			}
		}
		if err := eng.ImportState(st); err != nil {
			return err
		}
		st = zero.State{}
		return each(r, eng, c, acct)
	})
}

// moment is element i of Adam's moment k in bigRanks' engines.
func moment(k, i int) float32 { return float32((i+k)%7) * 1e-3 }

// TestSaveMemoryBounded: saving stage-3 ranks whose state (fp32 master
// and Adam's two moments) is several times the bound allocates, and
// accounts, no more than the bound a rank: the files are streamed from
// the partitions, not copied. The copy-based save allocated each rank's
// state twice over (ExportState's copy, then its bytes).
func TestSaveMemoryBounded(t *testing.T) {
	t.Run("in memory", func(t *testing.T) { testSaveMemory(t, false) })
	// Optimizer state in swap files: streamed from them one tensor at a
	// time through the swapper's pool, not read into memory whole.
	t.Run("nvme", func(t *testing.T) { testSaveMemory(t, true) })
}

func testSaveMemory(t *testing.T, swapped bool) {
	const world = 2
	l := bigLayout(6, 2048, 2048) // 25.2M parameters
	js := stageJSON(3, "fp32", 0)
	var swap []nvme.FS
	if swapped {
		js = strings.Replace(js, `"stage": 3`, `"stage": 3, "sub_group_size": 4194304, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}`, 1)
		for range world {
			m := nvme.NewMemFS(0)
			if err := m.Mkdir("/swap"); err != nil {
				t.Fatal(err)
			}
			swap = append(swap, m)
		}
	}
	plan, err := ztest.Plan(js, world)
	if err != nil {
		t.Fatal(err)
	}
	wo := ptfile.WriteOptions{}
	bound := saveBound(wo)
	stateBytes := int64(3 * 4 * l.Numel / world) // per rank
	if stateBytes < bound*3/2 {
		t.Fatalf("the model's state, %d bytes a rank, is too small to tell a streamed save from a copy", stateBytes)
	}
	dir := t.TempDir()
	extra := make([]int64, world)
	var before, after runtime.MemStats
	err = bigRanksOn(plan, &l, swap, true, func(r int, eng *zero.Engine, c comm.Comm, acct *mem.Accountant) error {
		// Allocations are measured around the saves alone: rank 0 reads
		// the counters while every rank waits between two barriers.
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		if r == 0 {
			runtime.GC()
			runtime.ReadMemStats(&before)
		}
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		live := acct.Snapshot().LiveTotal[mem.Device]
		acct.ResetPeaks()
		if err := checkpoint.Save(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c, Acct: acct, Write: wo}); err != nil {
			return err
		}
		extra[r] = acct.Snapshot().PeakTotal[mem.Device] - live
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		if r == 0 {
			runtime.ReadMemStats(&after)
		}
		return c.Barrier(context.Background()).Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("state %d MiB a rank; the save of %d ranks allocated %d MiB; the accountant's extra bytes %v (bound %d MiB a rank)",
		stateBytes>>20, world, allocated>>20, extra, bound>>20)
	if allocated > world*bound {
		t.Errorf("the save allocated %d bytes on %d ranks, more than %d a rank (the state is %d bytes a rank): it copies the state", allocated, world, bound, stateBytes)
	}
	for r, x := range extra {
		if x <= 0 || x > bound {
			t.Errorf("rank %d: the accountant's extra bytes during the save are %d, want in (0, %d]", r, x, bound)
		}
	}
}

// TestLoadMemoryBounded: loading the checkpoint of TestSaveMemoryBounded's
// ranks into fresh engines reads the partitions and moments into the
// engines' own buffers: the load allocates under the bound a rank (the
// file, and the state, are several times it), and the values arrive. At
// stages 1 and 2 the model has a parameter of odd size, so that the last
// rank's partition ends in padding, which its optimizer-state tensors
// hold in the file and its master partition does not. At stage 3 also
// with the optimizer state offloaded to the CPU, and to NVMe (its
// parameters too), in sub-groups: the partitions are read from the file
// through a buffer of the swap pool straight into their swap files. The
// accountant's count of the rank's memory (its tiers but NVMe) does not
// rise by more than the bound during the load either. The load before
// this (an intermediate copy of the state, then written to the swap
// files) allocated 3× the state at NVMe, and accounted a sub-group's
// optimizer state.
func TestLoadMemoryBounded(t *testing.T) {
	for _, tc := range []struct {
		stage   int
		offload string // zero_optimization's offload blocks
	}{
		{1, ""}, {2, ""}, {3, ""},
		{3, `, "offload_optimizer": {"device": "cpu"}`},
		{3, `, "sub_group_size": 4194304, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}`},
		{3, `, "sub_group_size": 4194304, "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}, "offload_param": {"device": "nvme", "nvme_path": "/swap"}`},
	} {
		name := fmt.Sprintf("stage %d", tc.stage)
		switch {
		case strings.Contains(tc.offload, "offload_param"):
			name += " nvme params"
		case strings.Contains(tc.offload, "nvme"):
			name += " nvme"
		case tc.offload != "":
			name += " cpu"
		}
		t.Run(name, func(t *testing.T) { testLoadMemory(t, tc.stage, tc.offload) })
	}
}

// swapFS is world in-memory filesystems with a folder /swap, or nil when
// js has no NVMe offload.
func swapFS(t *testing.T, js string, world int) []nvme.FS {
	if !strings.Contains(js, "nvme") {
		return nil
	}
	var out []nvme.FS
	for range world {
		m := nvme.NewMemFS(0)
		if err := m.Mkdir("/swap"); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// memoryBytes is what acct counts in the tiers of the rank's memory
// (all but NVMe), live and at the peak.
func memoryBytes(acct *mem.Accountant) (live, peak int64) {
	sn := acct.Snapshot()
	for _, tier := range mem.Tiers() {
		if tier != mem.NVMe {
			live += sn.LiveTotal[tier]
			peak += sn.PeakTotal[tier]
		}
	}
	return live, peak
}

func testLoadMemory(t *testing.T, stage int, offload string) {
	const world = 2
	l := bigLayout(6, 2048, 2048)
	if stage < 3 {
		l = biasedLayout(6, 2048, 2048, 3) // 3 mod 2·world: one element of padding
	}
	js := stageJSON(stage, "fp32", 0)
	if offload != "" {
		js = strings.Replace(js, `"stage": 3`, `"stage": 3`+offload, 1)
	}
	plan, err := ztest.Plan(js, world)
	if err != nil {
		t.Fatal(err)
	}
	bound := saveBound(ptfile.WriteOptions{})
	dir := t.TempDir()
	err = bigRanksOn(plan, &l, swapFS(t, js, world), true, func(r int, eng *zero.Engine, c comm.Comm, _ *mem.Accountant) error {
		return checkpoint.Save(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c})
	})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	extra := make([]int64, world)
	err = bigRanksOn(plan, &l, swapFS(t, js, world), false, func(r int, eng *zero.Engine, c comm.Comm, acct *mem.Accountant) error {
		if stage < 3 {
			// What the load must restore, not what the engine was built with.
			work, _ := eng.ModelBuffers()
			clear(work)
		}
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		if r == 0 {
			runtime.GC()
			runtime.ReadMemStats(&before)
		}
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		acct.ResetPeaks()
		live, _ := memoryBytes(acct)
		if err := checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c}); err != nil {
			return err
		}
		_, peak := memoryBytes(acct)
		extra[r] = peak - live
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		if r == 0 {
			runtime.ReadMemStats(&after)
		}
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		view := eng.ViewState
		if strings.Contains(offload, "nvme") {
			view = eng.ExportState // read back from the swap files (after the measurement)
		}
		v, err := view()
		if err != nil {
			return err
		}
		for g, gs := range v.Strategy.Groups {
			for k, n := range []string{"exp_avg", "exp_avg_sq"} {
				x := gs.Optim.State[n]
				for _, i := range []int{0, 1, len(x) / 2, len(x) - 1} {
					if x[i] != moment(k, i) {
						return fmt.Errorf("rank %d group %d: %s[%d] = %v loaded, %v saved", r, g, n, i, x[i], moment(k, i))
					}
				}
			}
			if gs.Optim.Steps != 1 {
				return fmt.Errorf("rank %d group %d: step %d loaded, 1 saved", r, g, gs.Optim.Steps)
			}
		}
		if stage < 3 {
			// The working parameters, gathered from every rank's loaded
			// master, are the ones saved (bigRanks' init: fp32, unrounded).
			work, _ := eng.ModelBuffers()
			for _, i := range []int{0, 1, len(work) / 2, len(work) - 2, len(work) - 1} {
				if want := float32(i%1000) / 1000; work[i] != want {
					return fmt.Errorf("rank %d: working parameter %d = %v loaded, %v saved", r, i, work[i], want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("the load of %d ranks allocated %d MiB, the accountant's extra bytes %v (bound %d MiB a rank; the state is %d MiB a rank)", world, allocated>>20, extra, bound>>20, 3*4*l.Numel/world>>20)
	if allocated > world*bound {
		t.Errorf("the load allocated %d bytes on %d ranks, more than %d a rank: it copies the state", allocated, world, bound)
	}
	for r, x := range extra {
		if x > bound {
			t.Errorf("rank %d: the accountant's extra bytes during the load are %d, more than %d", r, x, bound)
		}
	}
}
