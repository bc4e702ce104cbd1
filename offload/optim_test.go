package offload_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
	"github.com/google/go-cmp/cmp"
)

// layout is a rank's partitions of five parameters over 2 ranks (odd
// sizes, so some are padded), in sub-groups of about 15 elements.
func layout() partition.Stage3Layout {
	ps := []partition.Param{{Name: "a", Numel: 37}, {Name: "b", Numel: 100}, {Name: "c", Numel: 5}, {Name: "d", Numel: 64}, {Name: "e", Numel: 23}}
	return partition.Stage3(ps, 2, 15)
}

// optimizers are the kinds each store is run with: Adam's state exists
// from the start, SGD's momentum only after the first step (the swapped
// store loads it through a copy).
var optimizers = []struct {
	name string
	new  func(acct *mem.Accountant, tier mem.Tier) func(n int) (optim.Optimizer, error)
}{
	{"adamw", func(acct *mem.Accountant, tier mem.Tier) func(n int) (optim.Optimizer, error) {
		return func(n int) (optim.Optimizer, error) {
			c := optim.DefaultAdamConfig(optim.TorchAdamW)
			c.LR, c.WeightDecay = 1e-2, 0.1
			return optim.NewAdam(c, n, optim.Alloc{Acct: acct, Tier: tier}, nil)
		}
	}},
	{"sgd-momentum", func(acct *mem.Accountant, tier mem.Tier) func(n int) (optim.Optimizer, error) {
		return func(n int) (optim.Optimizer, error) {
			return optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9}, n, optim.Alloc{Acct: acct, Tier: tier}, nil)
		}
	}},
}

// store is one way to build an optimizer-state store.
type store struct {
	name string
	// lo, hi: the sub-groups stepped with the scheduler's hyperparameters
	// (the others keep the ones they were built with).
	lo, hi int
	build  func(t *testing.T, c offload.OptimConfig, init []float32) optimStore
}

// optimStore is what the tests call (stage3 defines its own).
type optimStore interface {
	Step(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error)
	MasterParams() ([]float32, error)
	WithMaster(f func([]float32) error) error
	Export(g int) (zcore.GroupState, error)
	View(g int) (zcore.GroupState, error)
	Import(g int, gs zcore.GroupState) error
	Scan(visit func(group int, name, file string, values []float32) error) error
	Close()
}

// memFS is an in-memory filesystem with the nvme_path /nvme.
func memFS(t *testing.T) *nvme.MemFS {
	t.Helper()
	fsys := nvme.NewMemFS(0)
	if err := fsys.Mkdir("/nvme"); err != nil {
		t.Fatal(err)
	}
	return fsys
}

// swapperOn makes swappers on fsys, remembering the last one made.
func swapperOn(fsys nvme.FS, acct *mem.Accountant, last **nvme.Swapper) func(largest, total int64) (*nvme.Swapper, error) {
	return func(largest, total int64) (*nvme.Swapper, error) {
		o := nvme.DefaultOptions()
		o.Path, o.Name, o.Source = "/nvme", "optimizer", "zero_optimization.offload_optimizer"
		o.BufferBytes, o.Preflight = largest, total
		sw, err := nvme.New(fsys, acct, o)
		*last = sw
		return sw, err
	}
}

func stores(k int) []store {
	memory := func(tier mem.Tier) func(t *testing.T, c offload.OptimConfig, init []float32) optimStore {
		return func(t *testing.T, c offload.OptimConfig, init []float32) optimStore {
			c.Place = offload.Place(c.Layout, tier, 0, k)
			m, err := offload.NewMemoryOptim(c, init, false)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	return []store{
		{"device", 0, k, memory(mem.Device)},
		{"pinned host", 0, k, memory(mem.PinnedHost)},
		{"partial", 1, k - 1, func(t *testing.T, c offload.OptimConfig, init []float32) optimStore {
			c.Place = offload.Place(c.Layout, mem.PinnedHost, 1, k-1)
			m, err := offload.NewMemoryOptim(c, init, false)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"nvme", 0, k, func(t *testing.T, c offload.OptimConfig, init []float32) optimStore {
			c.Place = offload.Place(c.Layout, mem.PinnedHost, 0, k)
			var sw *nvme.Swapper
			s, err := offload.NewSwappedOptim(c, init, swapperOn(memFS(t), c.Acct, &sw))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

// run steps st `steps` times over the same gradients as every other
// store, the learning rate set by the scheduler to 0.01·step (where the
// store lets it), and returns what it stepped, sub-group by sub-group.
func run(t *testing.T, st optimStore, lay partition.Stage3Layout, seed uint64, steps int) [][]float32 {
	t.Helper()
	return runWith(t, st, lay, seed, steps, func(step int, o optim.Optimizer) { o.SetLR(0.01 * float64(step+1)) })
}

// scanned is what Scan visited, by sub-group and name (files aside).
func scanned(t *testing.T, st optimStore) map[string][]float32 {
	t.Helper()
	got := map[string][]float32{}
	if err := st.Scan(func(g int, name, file string, v []float32) error {
		got[fmt.Sprintf("%d.%s", g, name)] = slices.Clone(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// viewed reads every tensor View shows of sub-group g: in place, or
// through its streamed readers.
func viewed(t *testing.T, st optimStore, g int) map[string][]float32 {
	t.Helper()
	gs, err := st.View(g)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	if gs.Streamed == nil {
		got["master"] = slices.Clone(gs.Master)
		for name, v := range gs.Optim.State {
			got[name] = slices.Clone(v)
		}
		return got
	}
	defer gs.Streamed.Close()
	for name, r := range gs.Streamed.Readers {
		b := make([]byte, 4*gs.Streamed.N)
		if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		got[name] = bytesF32(b)
	}
	return got
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = float32FromBits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return v
}

// TestOptimStores runs each optimizer-state store against the one in
// device memory: the same masters after every step, the same exported,
// viewed and scanned state, the same again after that state is imported
// into a fresh store of each kind and stepped on; and every byte handed
// back to the accountant at Close.
func TestOptimStores(t *testing.T) {
	lay := layout()
	k := len(lay.SubGroups)
	if k < 4 {
		t.Fatalf("the layout has %d sub-groups, the test wants at least 4", k)
	}
	init := make([]float32, lay.RankNumel)
	for i := range init {
		init[i] = float32(i%17)/8 - 1
	}
	for _, opt := range optimizers {
		t.Run(opt.name, func(t *testing.T) {
			build := func(s store, acct *mem.Accountant) optimStore {
				c := offload.OptimConfig{Acct: acct, Layout: lay, NewOptimizer: opt.new(acct, mem.PinnedHost), NewDeviceOptimizer: opt.new(acct, mem.Device)}
				return s.build(t, c, init)
			}
			// The references: every sub-group with the scheduler's lr, and
			// every sub-group with the lr it was built with.
			refAcct := mem.NewAccountant(1)
			ref := build(stores(k)[0], refAcct)
			defer ref.Close()
			want := run(t, ref, lay, 1, 3)
			fixed := build(stores(k)[0], refAcct)
			defer fixed.Close()
			wantFixed := runFixed(t, fixed, lay, 1, 3)
			for _, s := range stores(k) {
				t.Run(s.name, func(t *testing.T) {
					acct := mem.NewAccountant(1)
					st := build(s, acct)
					got := run(t, st, lay, 1, 3)
					for step := range got {
						exp := slices.Clone(want[step])
						for g := range lay.SubGroups {
							if g < s.lo || g >= s.hi {
								lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
								copy(exp[lo:lo+n], wantFixed[step][lo:lo+n])
							}
						}
						if d := cmp.Diff(exp, got[step]); d != "" {
							t.Fatalf("step %d: the stepped masters differ from the device store's (-want +got):\n%s", step+1, d)
						}
					}
					master, err := st.MasterParams()
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(got[len(got)-1], master); d != "" {
						t.Errorf("MasterParams is not the last step's masters (-want +got):\n%s", d)
					}
					if err := st.WithMaster(func(m []float32) error {
						if d := cmp.Diff(master, m); d != "" {
							return fmt.Errorf("WithMaster's masters differ from MasterParams (-want +got):\n%s", d)
						}
						return nil
					}); err != nil {
						t.Error(err)
					}
					if s.lo == 0 && s.hi == k { // the same state as the reference's
						if d := cmp.Diff(scanned(t, ref), scanned(t, st)); d != "" {
							t.Errorf("Scan differs from the device store's (-want +got):\n%s", d)
						}
						for g := range lay.SubGroups {
							if d := cmp.Diff(viewed(t, ref, g), viewed(t, st, g)); d != "" {
								t.Errorf("sub-group %d: View differs from the device store's (-want +got):\n%s", g, d)
							}
						}
					}
					// Export, import into a fresh store of each kind, step on.
					var exported []zcore.GroupState
					for g := range lay.SubGroups {
						gs, err := st.Export(g)
						if err != nil {
							t.Fatal(err)
						}
						exported = append(exported, gs)
					}
					next := run(t, st, lay, 9, 1)
					for _, into := range stores(k) {
						if into.lo != s.lo || into.hi != s.hi {
							continue // its sub-groups would step with other hyperparameters
						}
						a := mem.NewAccountant(1)
						fresh := build(into, a)
						for g, gs := range exported {
							if err := fresh.Import(g, gs); err != nil {
								t.Fatalf("import into %s, sub-group %d: %v", into.name, g, err)
							}
						}
						if d := cmp.Diff(next, run(t, fresh, lay, 9, 1)); d != "" {
							t.Errorf("exported, imported into %s and stepped: differs from stepping on (-want +got):\n%s", into.name, d)
						}
						fresh.Close()
						checkEmpty(t, a)
					}
					st.Close()
					checkEmpty(t, acct)
				})
			}
		})
	}
}

// runFixed is run without the scheduler: each sub-group keeps the
// hyperparameters its optimizer was built with.
func runFixed(t *testing.T, st optimStore, lay partition.Stage3Layout, seed uint64, steps int) [][]float32 {
	t.Helper()
	return runWith(t, st, lay, seed, steps, func(int, optim.Optimizer) {})
}

func runWith(t *testing.T, st optimStore, lay partition.Stage3Layout, seed uint64, steps int, set func(step int, o optim.Optimizer)) [][]float32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	grad := make([]float32, lay.RankNumel)
	var out [][]float32
	for step := range steps {
		for i := range grad {
			grad[i] = float32(rng.NormFloat64())
		}
		stepped := make([]float32, 0, lay.RankNumel)
		for g := range lay.SubGroups {
			lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
			master, err := st.Step(g, grad[lo:lo+n], func(o optim.Optimizer) { set(step, o) })
			if err != nil {
				t.Fatalf("step %d, sub-group %d: %v", step+1, g, err)
			}
			stepped = append(stepped, master...)
		}
		out = append(out, stepped)
	}
	return out
}

// checkEmpty fails unless every byte acct saw reserved was released.
func checkEmpty(t *testing.T, acct *mem.Accountant) {
	t.Helper()
	snap := acct.Snapshot()
	for tier, live := range snap.LiveTotal {
		if live != 0 {
			t.Errorf("tier %d: %d bytes still live after Close: %v", tier, live, snap.Live[tier])
		}
	}
}

// TestPlacementAccounting checks where partial offload's placement
// accounts the optimizer side: sub-groups [lo, hi) in the host tier, the
// rest on the device, element for element.
func TestPlacementAccounting(t *testing.T) {
	lay := layout()
	k := len(lay.SubGroups)
	acct := mem.NewAccountant(0)
	p := offload.Place(lay, mem.PinnedHost, 1, k-1)
	var host, dev int64
	for g := range k {
		if g >= 1 && g < k-1 {
			host += 4 * int64(lay.SubGroupNumel(g))
		} else {
			dev += 4 * int64(lay.SubGroupNumel(g))
		}
	}
	buf, err := p.Alloc(acct, mem.Grads)
	if err != nil {
		t.Fatal(err)
	}
	snap := acct.Snapshot()
	if got := [3]int64{int64(4 * len(buf)), snap.LiveBytes(mem.PinnedHost, mem.Grads), snap.LiveBytes(mem.Device, mem.Grads)}; got != [3]int64{4 * int64(lay.RankNumel), host, dev} {
		t.Errorf("buffer, host, device bytes = %v, want %v", got, [3]int64{4 * int64(lay.RankNumel), host, dev})
	}
	p.Free(acct, mem.Grads)
	checkEmpty(t, acct)
}

// TestSwappedOptimReadError: a sub-group whose swap file cannot be read
// fails its step with an error naming the file.
func TestSwappedOptimReadError(t *testing.T) {
	lay := layout()
	for _, fault := range []struct {
		name string
		f    nvme.Fault
	}{
		{"EIO", nvme.Fault{Ops: nvme.OpRead, Path: "subgroup1.master", Err: syscall.EIO}},
		{"corrupt", nvme.Fault{Ops: nvme.OpRead, Path: "subgroup1.master", Corrupt: true}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			acct := mem.NewAccountant(0)
			fsys := nvme.NewFaultFS(memFS(t))
			var sw *nvme.Swapper
			c := offload.OptimConfig{Acct: acct, Layout: lay, Place: offload.Place(lay, mem.PinnedHost, 0, len(lay.SubGroups)), NewOptimizer: optimizers[0].new(acct, mem.PinnedHost)}
			st, err := offload.NewSwappedOptim(c, make([]float32, lay.RankNumel), swapperOn(fsys, acct, &sw))
			if err != nil {
				t.Fatal(err)
			}
			fsys.Inject(fault.f)
			grad := make([]float32, lay.RankNumel)
			var stepErr error
			for g := range lay.SubGroups {
				lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
				if _, stepErr = st.Step(g, grad[lo:lo+n], func(optim.Optimizer) {}); stepErr != nil {
					break
				}
			}
			file := sw.Path("subgroup1.master")
			var ioe *nvme.IOError
			switch {
			case stepErr == nil:
				t.Fatal("the step read a faulty file without an error")
			case !strings.Contains(stepErr.Error(), file) || !errors.As(stepErr, &ioe):
				t.Errorf("error %q is not an *nvme.IOError naming %s", stepErr, file)
			}
			st.Close()
			checkEmpty(t, acct)
		})
	}
}

// TestSwappedOptimMasterReadError: the masters read back from swap
// files that cannot be read (an I/O error, silent corruption, a file
// removed under the run) are MasterParams' and WithMaster's error,
// naming the file — never a master that looks like success (issue 24:
// stage 3's MasterParams once returned an empty one).
func TestSwappedOptimMasterReadError(t *testing.T) {
	lay := layout()
	for _, tc := range []struct {
		name   string
		inject func(fsys *nvme.FaultFS, file string) error
	}{
		{"EIO", func(fsys *nvme.FaultFS, file string) error {
			fsys.Inject(nvme.Fault{Ops: nvme.OpRead, Path: "subgroup1.master", Err: syscall.EIO})
			return nil
		}},
		{"corrupt", func(fsys *nvme.FaultFS, file string) error {
			fsys.Inject(nvme.Fault{Ops: nvme.OpRead, Path: "subgroup1.master", Corrupt: true})
			return nil
		}},
		{"removed", func(fsys *nvme.FaultFS, file string) error { return fsys.Remove(file) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acct := mem.NewAccountant(0)
			fsys := nvme.NewFaultFS(memFS(t))
			var sw *nvme.Swapper
			c := offload.OptimConfig{Acct: acct, Layout: lay, Place: offload.Place(lay, mem.PinnedHost, 0, len(lay.SubGroups)), NewOptimizer: optimizers[0].new(acct, mem.PinnedHost)}
			st, err := offload.NewSwappedOptim(c, make([]float32, lay.RankNumel), swapperOn(fsys, acct, &sw))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				st.Close()
				checkEmpty(t, acct)
			}()
			if m, err := st.MasterParams(); err != nil || len(m) != lay.RankNumel {
				t.Fatalf("MasterParams before any fault: %d values, %v", len(m), err)
			}
			file := sw.Path("subgroup1.master")
			if err := tc.inject(fsys, file); err != nil {
				t.Fatal(err)
			}
			m, err := st.MasterParams()
			if err == nil || !strings.Contains(err.Error(), file) || m != nil {
				t.Errorf("MasterParams over a faulty swap file: %d values, %v; want an error naming %s", len(m), err, file)
			}
			called := false
			err = st.WithMaster(func([]float32) error { called = true; return nil })
			if err == nil || !strings.Contains(err.Error(), file) || called {
				t.Errorf("WithMaster over a faulty swap file: called %v, %v; want an error naming %s, f not called", called, err, file)
			}
		})
	}
}
