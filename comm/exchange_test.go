package comm_test

import (
	"context"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/google/go-cmp/cmp"
)

// TestAllToAll: on 1 to 4 in-process ranks, block j of rank r's input
// lands in block r of rank j's output (element values name their
// sender, block and index, so any misplaced element shows).
func TestAllToAll(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		const m = 5
		err := inproc.New(n, inproc.Options{}).Run(func(c comm.Comm) error {
			r := c.Rank()
			in, out := make([]float32, n*m), make([]float32, n*m)
			for j := range n {
				for i := range m {
					in[j*m+i] = float32(1000*r + 100*j + i)
				}
			}
			scratch := make([]float32, comm.AllToAllScratch(c, n*m))
			for range 2 { // the second call reuses the scratch
				clear(out)
				if err := comm.AllToAll(context.Background(), c, comm.F32(out), comm.F32(in), comm.F32(scratch)); err != nil {
					return err
				}
			}
			if err := comm.AllToAll(context.Background(), c, comm.F32(out), comm.F32(in), comm.Buffer{}); err != nil {
				return err // no scratch: allocated
			}
			want := make([]float32, n*m)
			for j := range n {
				for i := range m {
					want[j*m+i] = float32(1000*j + 100*r + i)
				}
			}
			if d := cmp.Diff(want, out); d != "" {
				t.Errorf("%d ranks, rank %d: (-want +got)\n%s", n, r, d)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestAllToAllRefuses: unequal blocks and overlapping buffers are errors,
// before anything is sent.
func TestAllToAllRefuses(t *testing.T) {
	err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		buf := make([]float32, 6)
		if err := comm.AllToAll(context.Background(), c, comm.F32(buf[:3]), comm.F32(buf[3:]), comm.Buffer{}); err == nil {
			t.Error("3 elements on 2 ranks: no error")
		}
		if err := comm.AllToAll(context.Background(), c, comm.F32(buf[:4]), comm.F32(buf[2:]), comm.Buffer{}); err == nil {
			t.Error("overlapping buffers: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
