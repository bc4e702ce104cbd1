package offload_test

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/google/go-cmp/cmp"
)

// loader is a store that takes a checkpoint's load tensor by tensor
// (stage3 defines its own).
type loader interface {
	optimStore
	BeginLoad(check func() error) (bool, error)
	LoadTensor(g int, name string, read func(dst []float32) error, putMaster func(master []float32) error) error
	EndLoad(err error) error
	ImportLoaded(groups []zcore.GroupState, check func(incomplete error) error) error
}

var (
	_ loader = (*offload.SwappedOptim)(nil)
	_ loader = (*offload.MemoryOptim)(nil)
)

// loadGroups loads groups into st through LoadTensor, as a checkpoint's
// loader does, and returns the masters putMaster was given.
func loadGroups(t *testing.T, st loader, groups []zcore.GroupState) [][]float32 {
	t.Helper()
	ok, err := st.BeginLoad(func() error { return nil })
	if err != nil || !ok {
		t.Fatalf("BeginLoad: %v, %v; want the swapped store to take the load", ok, err)
	}
	put := make([][]float32, len(groups))
	for g, gs := range groups {
		tensors := map[string][]float32{"master": gs.Master}
		for name, v := range gs.Optim.State {
			tensors[name] = v
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for n := range tensors {
				if !yield(n) {
					return
				}
			}
		}) {
			err := st.LoadTensor(g, name, func(dst []float32) error {
				if len(dst) != len(tensors[name]) {
					t.Fatalf("sub-group %d's %s: a buffer of %d elements for %d", g, name, len(dst), len(tensors[name]))
				}
				copy(dst, tensors[name])
				return nil
			}, func(m []float32) error {
				put[g] = slices.Clone(m)
				return nil
			})
			if err != nil {
				t.Fatalf("LoadTensor(%d, %s): %v", g, name, err)
			}
		}
	}
	if err := st.EndLoad(nil); err != nil {
		t.Fatalf("EndLoad: %v", err)
	}
	return put
}

// TestSwappedOptimLoad: a state exported from a stepped store and loaded
// tensor by tensor into a fresh swapped one (LoadTensor, EndLoad,
// ImportLoaded) exports the same, steps on the same as the store it came
// from, and gave each master to putMaster; for Adam and for SGD, whose
// momentum exists only after its first step.
func TestSwappedOptimLoad(t *testing.T) {
	lay := layout()
	k := len(lay.SubGroups)
	init := make([]float32, lay.RankNumel)
	for i := range init {
		init[i] = float32(i%17)/8 - 1
	}
	for _, opt := range optimizers {
		t.Run(opt.name, func(t *testing.T) {
			nvmeStore := stores(k)[3]
			acct := mem.NewAccountant(1)
			c := offload.OptimConfig{Acct: acct, Layout: lay, NewOptimizer: opt.new(acct, mem.PinnedHost)}
			src := nvmeStore.build(t, c, init)
			defer src.Close()
			run(t, src, lay, 1, 2)
			var exported []zcore.GroupState
			for g := range lay.SubGroups {
				gs, err := src.Export(g)
				if err != nil {
					t.Fatal(err)
				}
				exported = append(exported, gs)
			}
			dst := nvmeStore.build(t, c, make([]float32, lay.RankNumel)).(loader)
			defer dst.Close()
			put := loadGroups(t, dst, exported)
			// The step counts come with the groups, not the tensors.
			heads := make([]zcore.GroupState, len(exported))
			for g, gs := range exported {
				heads[g].Optim = gs.Optim
				heads[g].Optim.State = nil
			}
			checked := false
			if err := dst.ImportLoaded(heads, func(incomplete error) error {
				checked = true
				return incomplete
			}); err != nil {
				t.Fatalf("ImportLoaded: %v", err)
			}
			if !checked {
				t.Error("ImportLoaded did not run the caller's check")
			}
			for g, gs := range exported {
				if d := cmp.Diff(gs.Master, put[g]); d != "" {
					t.Errorf("sub-group %d: putMaster was not given the loaded master (-want +got):\n%s", g, d)
				}
				got, err := dst.Export(g)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(gs, got); d != "" {
					t.Errorf("sub-group %d: the loaded store exports otherwise (-want +got):\n%s", g, d)
				}
			}
			if d := cmp.Diff(run(t, src, lay, 9, 2), run(t, dst, lay, 9, 2)); d != "" {
				t.Errorf("the loaded store steps otherwise (-want +got):\n%s", d)
			}
		})
	}
}

// TestSwappedOptimLoadRefuses: a load of a state this store cannot take,
// or one that failed part way, is refused with an error naming what is
// wrong, and the swap files it wrote are not taken as a state.
func TestSwappedOptimLoadRefuses(t *testing.T) {
	lay := layout()
	k := len(lay.SubGroups)
	acct := mem.NewAccountant(1)
	c := offload.OptimConfig{Acct: acct, Layout: lay, NewOptimizer: optimizers[0].new(acct, mem.PinnedHost)}
	fresh := func(t *testing.T) loader {
		st := stores(k)[3].build(t, c, make([]float32, lay.RankNumel)).(loader)
		t.Cleanup(st.Close)
		if ok, err := st.BeginLoad(func() error { return nil }); !ok || err != nil {
			t.Fatalf("BeginLoad: %v, %v", ok, err)
		}
		return st
	}
	fill := func(dst []float32) error { return nil }
	keep := func([]float32) error { return nil }
	// The groups' heads, as a fresh store of this optimizer exports them.
	groups := make([]zcore.GroupState, k)
	{
		st := stores(k)[3].build(t, c, make([]float32, lay.RankNumel))
		for g := range groups {
			gs, err := st.Export(g)
			if err != nil {
				t.Fatal(err)
			}
			groups[g].Optim = gs.Optim
			groups[g].Optim.State = nil
		}
		st.Close()
	}
	pass := func(incomplete error) error { return incomplete }

	t.Run("refused by the caller", func(t *testing.T) {
		st := stores(k)[3].build(t, c, make([]float32, lay.RankNumel)).(loader)
		defer st.Close()
		busy := errors.New("not fresh")
		if ok, err := st.BeginLoad(func() error { return busy }); ok || !errors.Is(err, busy) {
			t.Errorf("BeginLoad with a failing check: %v, %v; want false and its error", ok, err)
		}
	})
	t.Run("another sub_group_size", func(t *testing.T) {
		st := fresh(t)
		if err := st.LoadTensor(k, "master", fill, keep); err == nil || !strings.Contains(err.Error(), "sub_group_size") {
			t.Errorf("LoadTensor of sub-group %d of %d: %v; want an error naming sub_group_size", k, k, err)
		}
	})
	t.Run("another optimizer's state", func(t *testing.T) {
		st := fresh(t)
		if err := st.LoadTensor(0, "momentum_buffer", fill, keep); err == nil || !strings.Contains(err.Error(), `"momentum_buffer"`) {
			t.Errorf("LoadTensor of SGD's momentum into AdamW's store: %v; want an error naming it", err)
		}
	})
	t.Run("a failed read voids the load", func(t *testing.T) {
		st := fresh(t)
		bad := errors.New("sha256 mismatch in file.pt")
		if err := st.LoadTensor(0, "exp_avg", func([]float32) error { return bad }, keep); !errors.Is(err, bad) || !strings.Contains(err.Error(), "sub-group 0's exp_avg") {
			t.Errorf("LoadTensor with a failing read: %v; want its error, naming the tensor", err)
		}
		if err := st.LoadTensor(1, "master", fill, keep); !errors.Is(err, bad) {
			t.Errorf("LoadTensor after a failed one: %v; want the load's failure", err)
		}
		if err := st.EndLoad(nil); !errors.Is(err, bad) {
			t.Errorf("EndLoad after a failed LoadTensor: %v; want its failure", err)
		}
		err := st.ImportLoaded(groups, pass)
		if err == nil || !strings.Contains(err.Error(), "did not complete") || !errors.Is(err, bad) {
			t.Errorf("ImportLoaded after a failed load: %v; want it refused", err)
		}
	})
	t.Run("a failed write voids the load", func(t *testing.T) {
		fsys := nvme.NewFaultFS(memFS(t))
		var sw *nvme.Swapper
		st, err := offload.NewSwappedOptim(offload.OptimConfig{Acct: acct, Layout: lay, Place: offload.Place(lay, mem.PinnedHost, 0, k), NewOptimizer: c.NewOptimizer}, make([]float32, lay.RankNumel), swapperOn(fsys, acct, &sw))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if ok, err := st.BeginLoad(func() error { return nil }); !ok || err != nil {
			t.Fatalf("BeginLoad: %v, %v", ok, err)
		}
		fsys.Inject(nvme.Fault{Ops: nvme.OpWrite, Err: syscall.ENOSPC})
		if err := st.LoadTensor(0, "master", fill, keep); err != nil {
			t.Fatalf("LoadTensor: %v (its write fails later, at EndLoad)", err)
		}
		if err := st.EndLoad(nil); err == nil || !strings.Contains(err.Error(), "writing the checkpoint's state to the swap files") {
			t.Errorf("EndLoad after a failed write: %v; want an error naming the write", err)
		}
		if err := st.ImportLoaded(groups, pass); err == nil || !strings.Contains(err.Error(), "did not complete") {
			t.Errorf("ImportLoaded after a failed write: %v; want it refused", err)
		}
	})
	t.Run("no master", func(t *testing.T) {
		st := fresh(t)
		for g := range k - 1 {
			if err := st.LoadTensor(g, "master", fill, keep); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.EndLoad(nil); err != nil {
			t.Fatal(err)
		}
		if err := st.ImportLoaded(groups, pass); err == nil || !strings.Contains(err.Error(), "no fp32 master partition of sub-group") {
			t.Errorf("ImportLoaded without sub-group %d's master: %v; want an error naming it", k-1, err)
		}
	})
	t.Run("the caller's check first", func(t *testing.T) {
		st := fresh(t)
		wrong := errors.New("another world size")
		if err := st.ImportLoaded(groups, func(error) error { return wrong }); !errors.Is(err, wrong) {
			t.Errorf("ImportLoaded with a failing check: %v; want its error", err)
		}
	})
}

// TestMemoryOptimTakesNoLoad: a store in memory leaves a checkpoint's
// load to View's buffers and Import (BeginLoad false, its check not
// run; EndLoad passes the loader's verdict through).
func TestMemoryOptimTakesNoLoad(t *testing.T) {
	lay := layout()
	acct := mem.NewAccountant(1)
	c := offload.OptimConfig{Acct: acct, Layout: lay, NewOptimizer: optimizers[0].new(acct, mem.Device)}
	st := stores(len(lay.SubGroups))[0].build(t, c, make([]float32, lay.RankNumel)).(loader)
	defer st.Close()
	if ok, err := st.BeginLoad(func() error { return errors.New("called") }); ok || err != nil {
		t.Errorf("BeginLoad: %v, %v; want false, and the check not called", ok, err)
	}
	verdict := errors.New("a rank failed")
	if err := st.EndLoad(verdict); err != verdict {
		t.Errorf("EndLoad: %v; want the loader's verdict", err)
	}
}

// TestParamLoad: a master loaded from a checkpoint (Load) reaches the
// working partitions as a stepped one does (Update) — rounded, and in
// the swap files where the store keeps them, with reads ahead started
// before it dropped — for every store that is not the master itself.
func TestParamLoad(t *testing.T) {
	lay := layout()
	persist := []bool{false, false, true, false, false}
	names := []string{"a", "b", "c", "d", "e"}
	type loadingStore interface {
		paramStore
		Load(g int, master []float32) error
	}
	for _, k := range paramStores() {
		if k.aliased {
			continue // no store of the master in swap files loads into it
		}
		t.Run(k.name, func(t *testing.T) {
			put := func(load bool) [][]float32 {
				acct := mem.NewAccountant(0)
				c := offload.ParamConfig{Acct: acct, Layout: lay, Persist: persist, Names: names, Round: round64}
				ps, _, _ := k.build(t, c)
				p := ps.(loadingStore)
				defer func() {
					p.Close()
					checkEmpty(t, acct)
				}()
				if err := p.Commit(); err != nil {
					t.Fatal(err)
				}
				if p.CanReadAhead() {
					p.ReadAhead(0, len(names)-1) // of the old values: Load must drop them
				}
				for g := range lay.SubGroups {
					lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
					master := make([]float32, n)
					for i := range master {
						master[i] = float32((lo+i)*5%31)/9 - 1.5
					}
					f := p.Update
					if load {
						f = p.Load
					}
					if err := f(g, master); err != nil {
						t.Fatalf("sub-group %d: %v", g, err)
					}
				}
				return reads(t, p, c)
			}
			want, got := put(false), put(true)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("the partitions read after Load differ from those after Update (-want +got):\n%s", d)
			}
			for i, v := range got {
				for j, x := range v {
					y := []float32{x}
					if round64(y); y[0] != x {
						t.Fatalf("partition %d[%d] = %v is not rounded", i, j, x)
					}
				}
			}
		})
	}
}
