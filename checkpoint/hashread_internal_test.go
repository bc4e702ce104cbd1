package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// TestLoadReadsOnce: reading an optim-states file as a load does —
// readOptim over a hashingReader — reads its tensors in the file's order,
// so that the sha256 comes from those reads: what is read only to hash it
// (zip headers, the pickle, the small storages) is a small part of the
// file, and the sha256 is the manifest's. At stage 3 with several
// sub-groups too (every group's state is saved before the fp32 groups).
func TestLoadReadsOnce(t *testing.T) {
	var b model.LayoutBuilder
	for u := range 4 {
		b.Unit(fmt.Sprintf("h.%d", u))
		b.Param(fmt.Sprintf("h.%d.weight", u), model.Init{}, 256, 255)
	}
	l := b.Build()
	for _, tc := range []struct{ stage, subGroup int }{{1, 0}, {2, 0}, {3, 0}, {3, 70000}} {
		t.Run(fmt.Sprintf("stage %d sub-group %d", tc.stage, tc.subGroup), func(t *testing.T) {
			sg := ""
			if tc.subGroup > 0 {
				sg = fmt.Sprintf(`, "sub_group_size": %d`, tc.subGroup)
			}
			plan, err := dsconfig.Load(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
				"zero_optimization": {"stage": %d%s}}`, tc.stage, sg), dsconfig.Options{WorldSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			groups := 0
			err = inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
				eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &l, Init: make([]float32, l.Numel), Workers: 1, Comm: c, Ctx: context.Background()})
				if err != nil {
					return err
				}
				defer eng.Close()
				if c.Rank() == 1 {
					v, err := eng.ViewState()
					if err != nil {
						return err
					}
					groups = len(v.Strategy.Groups)
				}
				return Save(dir, "t", eng, Options{Layout: &l, Comm: c})
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.subGroup > 0 && groups < 2 {
				t.Fatalf("%d sub-groups on rank 1, want several", groups)
			}
			path := filepath.Join(dir, "t")
			man, err := readManifest(path, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, name := FileNames(tc.stage, 1, device.F32)
			var want manifestEntry
			for _, e := range man.Files {
				if e.Name == name {
					want = e
				}
			}
			fd, err := os.Open(filepath.Join(path, name))
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			hr := newHashingReader(fd, want.Bytes)
			f, err := ptfile.NewReader(hr, want.Bytes, name, ptfile.Options{DeepSpeed: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := streamFile(f, &l, 2); err != nil {
				t.Fatal(err)
			}
			st := zero.State{}
			st.Strategy.Stage = tc.stage
			if err := readOptim(f.Root, &st, target{}); err != nil {
				t.Fatal(err)
			}
			read := hr.extra // before sum: what the reads skipped and had to read
			sum, err := hr.sum()
			if err != nil {
				t.Fatal(err)
			}
			if sum != want.SHA256 {
				t.Errorf("sha256 %s from the reads, the manifest's %s", sum, want.SHA256)
			}
			t.Logf("%s: %d bytes, %d read only to hash them before the end, %d in all", name, want.Bytes, read, hr.extra)
			if limit := want.Bytes / 20; hr.extra > limit {
				t.Errorf("%d of the file's %d bytes were read only to hash them (more than %d): the tensors are not read in the file's order", hr.extra, want.Bytes, limit)
			}
		})
	}
}
