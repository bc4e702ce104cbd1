package offload_test

import (
	"errors"
	"math"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/google/go-cmp/cmp"
)

// paramStore is what the tests call (stage3 defines its own).
type paramStore interface {
	Work() []float32
	Commit() error
	Read(i int, dst []float32) error
	CanReadAhead() bool
	ReadAhead(first, last int) bool
	DropAhead()
	Update(g int, master []float32) error
	TakeReads() offload.Reads
	Close()
}

// paramStoreKind is one way to build a parameter store.
type paramStoreKind struct {
	name string
	// aliased: the store's buffer is the master, stepped in place before
	// Update (AliasedParams); only for fp32.
	aliased bool
	build   func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS)
}

// paramSwapper makes parameter swappers of `buffers` buffers on fsys,
// remembering the one made.
func paramSwapper(fsys nvme.FS, acct *mem.Accountant, buffers int, last **nvme.Swapper) func(largest, total int64) (*nvme.Swapper, error) {
	return func(largest, total int64) (*nvme.Swapper, error) {
		o := nvme.DefaultOptions()
		o.Path, o.Name, o.Source = "/nvme", "params", "zero_optimization.offload_param"
		o.BufferCount, o.BufferBytes, o.Preflight, o.Category = buffers, largest, total, mem.Params16
		sw, err := nvme.New(fsys, acct, o)
		*last = sw
		return sw, err
	}
}

func paramStores() []paramStoreKind {
	memory := func(tier mem.Tier) func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS) {
		return func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS) {
			c.Tier = tier
			p, err := offload.NewMemoryParams(c)
			if err != nil {
				t.Fatal(err)
			}
			return p, nil, nil
		}
	}
	swapped := func(buffers int, noAhead bool) func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS) {
		return func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS) {
			fsys := nvme.NewFaultFS(memFS(t))
			sw := new(*nvme.Swapper) // made at Commit
			p, err := offload.NewSwappedParams(c, paramSwapper(fsys, c.Acct, buffers, sw), noAhead)
			if err != nil {
				t.Fatal(err)
			}
			return p, sw, fsys
		}
	}
	return []paramStoreKind{
		{"device", false, memory(mem.Device)},
		{"pinned host", false, memory(mem.PinnedHost)},
		{"aliased", true, func(t *testing.T, c offload.ParamConfig) (paramStore, **nvme.Swapper, *nvme.FaultFS) {
			p, err := offload.NewAliasedParams(c)
			if err != nil {
				t.Fatal(err)
			}
			return p, nil, nil
		}},
		{"nvme, read ahead", false, swapped(3, false)},
		{"nvme, no read ahead", false, swapped(3, true)},
	}
}

// round64 rounds to multiples of 1/64: a stand-in for the training
// precision's rounding.
func round64(xs []float32) {
	for i, x := range xs {
		xs[i] = float32(math.Round(float64(x)*64) / 64)
	}
}

// reads is every partition as Read puts it into a gather's input.
func reads(t *testing.T, p paramStore, c offload.ParamConfig) [][]float32 {
	t.Helper()
	var out [][]float32
	for i, n := range c.Layout.PartitionSizes {
		dst := make([]float32, n)
		if err := p.Read(i, dst); err != nil {
			t.Fatalf("parameter %s: %v", c.Names[i], err)
		}
		out = append(out, dst)
	}
	return out
}

// TestParamStores runs each parameter store against the one in device
// memory: the same partitions read after initialization, after reads
// ahead, after each sub-group's update (rounded) — also where a read
// ahead was started before the update wrote the file — and every byte
// handed back to the accountant at Close.
func TestParamStores(t *testing.T) {
	lay := layout()
	persist := []bool{false, false, true, false, false}
	names := []string{"a", "b", "c", "d", "e"}
	last := len(names) - 1
	for _, round := range []struct {
		name string
		f    func([]float32)
	}{{"fp32", nil}, {"rounded", round64}} {
		t.Run(round.name, func(t *testing.T) {
			run := func(k paramStoreKind) (got [][][]float32, counts []offload.Reads) {
				acct := mem.NewAccountant(0)
				c := offload.ParamConfig{Acct: acct, Layout: lay, Persist: persist, Names: names, Round: round.f}
				p, _, _ := k.build(t, c)
				for i := range p.Work() {
					p.Work()[i] = float32(i%13)/4 - 1.3
				}
				if round.f != nil {
					round.f(p.Work())
				}
				if err := p.Commit(); err != nil {
					t.Fatal(err)
				}
				got = append(got, reads(t, p, c))
				if p.CanReadAhead() {
					p.ReadAhead(0, last)
				}
				got = append(got, reads(t, p, c))
				counts = append(counts, p.TakeReads())
				for step := range 2 {
					if p.CanReadAhead() {
						p.ReadAhead(0, last) // the updates must not read what these read
					}
					for g := range lay.SubGroups {
						lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
						master := make([]float32, n)
						for i := range master {
							master[i] = float32((lo+i)*(step+3)%29)/7 - 2
						}
						if k.aliased {
							master = p.Work()[lo : lo+n]
							for i := range master {
								master[i] = float32((lo+i)*(step+3)%29)/7 - 2
							}
						}
						if err := p.Update(g, master); err != nil {
							t.Fatalf("step %d, sub-group %d: %v", step+1, g, err)
						}
					}
					got = append(got, reads(t, p, c))
					counts = append(counts, p.TakeReads())
				}
				p.DropAhead()
				p.Close()
				checkEmpty(t, acct)
				return got, counts
			}
			kinds := paramStores()
			want, _ := run(kinds[0])
			for _, k := range kinds[1:] {
				if k.aliased && round.f != nil {
					continue // aliasing is fp32 only
				}
				t.Run(k.name, func(t *testing.T) {
					got, counts := run(k)
					if d := cmp.Diff(want, got); d != "" {
						t.Errorf("the partitions read differ from the device store's (-want +got):\n%s", d)
					}
					if k.name == "nvme, read ahead" {
						// 4 non-persistent partitions, 2 read-ahead buffers (3 − 1):
						// 8 reads in the first two passes, 2 of them ahead; the
						// reads ahead before each update are dropped by it.
						want := []offload.Reads{{Reads: 8, Ahead: 2}, {Reads: 4, Unused: 2}, {Reads: 4, Unused: 2}}
						for i := range counts {
							counts[i].Wait, counts[i].Ready = 0, 0
						}
						if d := cmp.Diff(want, counts); d != "" {
							t.Errorf("reads (-want +got):\n%s", d)
						}
					}
				})
			}
		})
	}
}

// TestParamAccounting checks where the parameter stores account the
// working partitions: the persistent ones on the device, the rest in
// offload_param's tier (MemoryParams), in the swap files (SwappedParams:
// the swapper's), or once, as the fp32 master (AliasedParams).
func TestParamAccounting(t *testing.T) {
	lay := layout()
	persist := []bool{false, true, false, false, true}
	pers := 4 * int64(lay.PartitionSizes[1]+lay.PartitionSizes[4])
	all := 4 * int64(lay.RankNumel)
	type live struct{ DevParams, HostParams, DevMaster int64 }
	for _, tc := range []struct {
		kind int
		want live
	}{
		{0, live{all, 0, 0}},
		{1, live{pers, all - pers, 0}},
		{2, live{0, 0, all}},
		{3, live{pers, -1, 0}}, // the host side is the swapper's buffers
	} {
		k := paramStores()[tc.kind]
		t.Run(k.name, func(t *testing.T) {
			acct := mem.NewAccountant(0)
			c := offload.ParamConfig{Acct: acct, Layout: lay, Persist: persist, Names: []string{"a", "b", "c", "d", "e"}}
			p, _, _ := k.build(t, c)
			if err := p.Commit(); err != nil {
				t.Fatal(err)
			}
			s := acct.Snapshot()
			got := live{s.LiveBytes(mem.Device, mem.Params16), s.LiveBytes(mem.PinnedHost, mem.Params16), s.LiveBytes(mem.Device, mem.MasterParams)}
			if tc.want.HostParams < 0 {
				got.HostParams = -1
			}
			if got != tc.want {
				t.Errorf("live bytes %+v, want %+v", got, tc.want)
			}
			p.Close()
			checkEmpty(t, acct)
		})
	}
}

// TestSwappedParamsReadError: a partition whose swap file cannot be read
// fails the gather's read with an *nvme.IOError naming the file, whether
// the read was started ahead of the gather or by it.
func TestSwappedParamsReadError(t *testing.T) {
	lay := layout()
	names := []string{"a", "b", "c", "d", "e"}
	for _, ahead := range []bool{false, true} {
		for _, fault := range []nvme.Fault{
			{Ops: nvme.OpRead, Path: "param1", Err: syscall.EIO},
			{Ops: nvme.OpRead, Path: "param1", Corrupt: true},
		} {
			acct := mem.NewAccountant(0)
			c := offload.ParamConfig{Acct: acct, Layout: lay, Persist: make([]bool, len(names)), Names: names}
			p, sw, fsys := paramStores()[3].build(t, c)
			if err := p.Commit(); err != nil {
				t.Fatal(err)
			}
			fsys.Inject(fault)
			if ahead {
				p.ReadAhead(0, len(names)-1)
			}
			err := p.Read(1, make([]float32, lay.PartitionSizes[1]))
			file := (*sw).Path("param1")
			var ioe *nvme.IOError
			if err == nil || !errors.As(err, &ioe) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "partition of b") {
				t.Errorf("read ahead %v, fault %+v: error %v, want an *nvme.IOError naming %s and parameter b", ahead, fault, err, file)
			}
			// The other partitions still read.
			if err := p.Read(0, make([]float32, lay.PartitionSizes[0])); err != nil {
				t.Errorf("read ahead %v: parameter a after b failed: %v", ahead, err)
			}
			p.DropAhead()
			p.Close()
			checkEmpty(t, acct)
		}
	}
}
