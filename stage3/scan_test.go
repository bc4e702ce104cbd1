package stage3_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/stage3"
	"github.com/dszero/dszero/zero"
)

// TestScanState: ScanState visits every sub-group's master and
// optimizer state — in memory on the device, on the pinned host, and
// from the swap files with offload_optimizer nvme, through one buffer or
// several read ahead — with exactly what ExportState exports, naming the
// swap file of each tensor read from one. A state imported with NaN in
// one tensor shows there, and a swap file corrupted under the run fails
// the scan with a checksum mismatch naming it.
func TestScanState(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	k := variants()[9] // sub-groups of 1000 elements
	for _, tc := range []struct {
		name, offload string
		corrupt       bool
	}{
		{"device", "", false},
		{"cpu", `"offload_optimizer": {"device": "cpu"},`, false},
		{"nvme/1 buffer", `"offload_optimizer": {"device": "nvme", "nvme_path": "/", "buffer_count": 1},`, false},
		{"nvme/4 buffers", `"offload_optimizer": {"device": "nvme", "nvme_path": "/", "buffer_count": 4},`, false},
		{"nvme/corrupted", `"offload_optimizer": {"device": "nvme", "nvme_path": "/", "buffer_count": 4},`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, `+tc.offload, 1)
			plan, err := ztest.Plan(js, 1)
			if err != nil {
				t.Fatal(err)
			}
			fsys := nvme.NewFaultFS(nvme.NewMemFS(0))
			err = inproc.New(1, inproc.Options{}).Run(func(c comm.Comm) error {
				eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(0), Layout: &d.Layout, Init: d.Init, Workers: 1,
					Comm: c, Ctx: context.Background(), SwapFS: fsys})
				if err != nil {
					return err
				}
				defer eng.Close()
				s := eng.Strategy().(*stage3.Strategy)
				st, err := eng.ExportState()
				if err != nil {
					return err
				}
				// NaN and Inf in sub-group 1's exp_avg_sq, the rest as it was.
				groups := st.Strategy.Groups
				if len(groups) < 3 {
					t.Fatalf("%d sub-groups, want several", len(groups))
				}
				bad := groups[1].Optim.State["exp_avg_sq"]
				bad[3], bad[7] = float32(math.NaN()), float32(math.Inf(-1))
				if err := eng.ImportState(st); err != nil {
					return err
				}
				swapped := strings.Contains(tc.offload, "nvme")
				if tc.corrupt {
					fsys.Inject(nvme.Fault{Ops: nvme.OpRead, Path: "subgroup2.exp_avg.swp", Corrupt: true})
				}

				var seen []string
				err = s.ScanState(func(g int, name, file string, v []float32) error {
					seen = append(seen, fmt.Sprintf("%d.%s", g, name))
					want := groups[g].Master
					if name != "master" {
						want = groups[g].Optim.State[name]
					}
					if !slices.EqualFunc(v, want, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
						t.Errorf("sub-group %d %s: scanned values differ from the exported ones", g, name)
					}
					if wantFile := fmt.Sprintf("/dszero_rank0/optimizer/subgroup%d.%s.swp", g, name); swapped && file != wantFile || !swapped && file != "" {
						t.Errorf("sub-group %d %s: file %q (swapped: %v)", g, name, file, swapped)
					}
					return nil
				})
				if tc.corrupt {
					if !errors.Is(err, nvme.ErrChecksum) || !strings.Contains(err.Error(), "/dszero_rank0/optimizer/subgroup2.exp_avg.swp") {
						t.Errorf("scan over a corrupted swap file = %v, want a checksum mismatch naming it", err)
					}
					return nil
				}
				if err != nil {
					return err
				}
				var want []string
				for g, gs := range groups {
					want = append(want, fmt.Sprintf("%d.master", g))
					for _, name := range gs.Optim.Names {
						if _, ok := gs.Optim.State[name]; ok {
							want = append(want, fmt.Sprintf("%d.%s", g, name))
						}
					}
				}
				if !slices.Equal(seen, want) {
					t.Errorf("visited %v, want %v", seen, want)
				}
				// A visit's error stops the scan, and the buffers go back.
				stop := errors.New("stop")
				n := 0
				if err := s.ScanState(func(int, string, string, []float32) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
					t.Errorf("a failing visit: %v after %d visits", err, n)
				}
				if err := s.ScanState(func(int, string, string, []float32) error { return nil }); err != nil {
					t.Errorf("a scan after a stopped one: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMasterParamsSwapError: with offload_optimizer nvme the master
// partitions are read back from their swap files, and a read that fails
// its checksum is MasterParams' error, naming the file — not an empty
// master that looks like success.
func TestMasterParamsSwapError(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	k := variants()[9]
	js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/"},`, 1)
	plan, err := ztest.Plan(js, 1)
	if err != nil {
		t.Fatal(err)
	}
	fsys := nvme.NewFaultFS(nvme.NewMemFS(0))
	err = inproc.New(1, inproc.Options{}).Run(func(c comm.Comm) error {
		eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(0), Layout: &d.Layout, Init: d.Init, Workers: 1,
			Comm: c, Ctx: context.Background(), SwapFS: fsys})
		if err != nil {
			return err
		}
		defer eng.Close()
		m, err := eng.MasterParams()
		if err != nil || len(m) == 0 {
			t.Errorf("MasterParams before any fault: %d values, %v", len(m), err)
		}
		fsys.Inject(nvme.Fault{Ops: nvme.OpRead, Path: "subgroup1.master.swp", Corrupt: true})
		m, err = eng.MasterParams()
		if !errors.Is(err, nvme.ErrChecksum) || !strings.Contains(err.Error(), "subgroup1.master.swp") || m != nil {
			t.Errorf("MasterParams over a corrupted swap file: %d values, %v; want a checksum error naming it", len(m), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
