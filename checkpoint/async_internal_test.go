package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero"
)

// A background write that fails is an error of every rank at the next
// Poll or Wait naming the checkpoint (and, on the failing rank, the file
// and the cause); nothing is published; the snapshot's memory is given
// back; and the next save succeeds.
func TestSaveAsyncErrorSurfaces(t *testing.T) {
	var b model.LayoutBuilder
	b.Unit("h.0")
	b.Param("h.0.weight", model.Init{}, 64, 32)
	b.Unit("h.1")
	b.Param("h.1.weight", model.Init{}, 32, 16)
	l := b.Build()
	plan, err := dsconfig.Load(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
		"zero_optimization": {"stage": 3}}`, dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	disk := errors.New("injected: no space left")
	errs := make([]error, 2)
	err = inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		r := c.Rank()
		acct := mem.NewAccountant(r)
		eng, err := zero.NewEngine(plan, zero.Options{Acct: acct, Layout: &l, Init: make([]float32, l.Numel), Workers: 1, Comm: c, Ctx: context.Background()})
		if err != nil {
			return err
		}
		defer eng.Close()
		o := Options{Layout: &l, Comm: c, Acct: acct}
		o.fault = func(p string) error {
			if r == 1 && strings.Contains(p, "optim_states") {
				return disk
			}
			return nil
		}
		p, err := SaveAsync(dir, "bad", eng, o)
		if err != nil {
			return err
		}
		if acct.Snapshot().LiveBytes(mem.PinnedHost, mem.Temp) == 0 {
			t.Errorf("rank %d: the snapshot is not accounted", r)
		}
		errs[r] = p.Wait()
		if n := acct.Snapshot().LiveBytes(mem.PinnedHost, mem.Temp); n != 0 {
			t.Errorf("rank %d: %d bytes of the snapshot still accounted after Wait", r, n)
		}
		o.fault = nil
		p, err = SaveAsync(dir, "good", eng, o)
		if err != nil {
			return err
		}
		for {
			done, err := p.Poll()
			if err != nil || done {
				return err
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, e := range errs {
		if e == nil || !strings.Contains(e.Error(), filepath.Join(dir, "bad")) {
			t.Errorf("rank %d: %v, want an error naming %s", r, e, filepath.Join(dir, "bad"))
		}
	}
	if !errors.Is(errs[1], disk) || !strings.Contains(errs[1].Error(), "zero_pp_rank_1_mp_rank_00_optim_states.pt") {
		t.Errorf("rank 1: %v, want the injected error and the file", errs[1])
	}
	if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
		t.Error("the failed checkpoint was published")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest")); err != nil || string(b) != "good" {
		t.Errorf("latest: %q, %v; want good", b, err)
	}
}
