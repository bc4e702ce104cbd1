package zcore

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// tiedUnits: an embedding unit 0 (10 elements), a block (6) and a head (0
// elements of its own) that borrows unit 0, as a GPT with tied embeddings.
func tiedUnits() []model.Unit {
	return []model.Unit{
		{Name: "embeddings", Numel: 10},
		{Name: "blocks.0", Offset: 10, Numel: 6},
		{Name: "head", Offset: 16, Numel: 0, Borrows: []int{0}},
	}
}

// TestUnitGradsTiedHead walks a backward pass in reverse unit order: the
// embeddings' gradients are live from the head's BeforeBackward and are
// complete only at their own AfterBackward.
func TestUnitGradsTiedHead(t *testing.T) {
	acct := mem.NewAccountant(0)
	g := NewUnitGrads("stage 2", acct, tiedUnits())
	var completed []int
	complete := func(v int) error { completed = append(completed, v); return nil }
	// The accountant's Comm bytes and LiveNumel must agree throughout.
	live := func() int64 {
		b := acct.Snapshot().LiveBytes(mem.Device, mem.Comm)
		if n := g.LiveNumel(); 4*int64(n) != b {
			t.Errorf("LiveNumel %d, but %d bytes accounted", n, b)
		}
		return b
	}

	var lives []int64
	var alls []bool
	for _, u := range []int{2, 1, 0} {
		if err := g.Before(u); err != nil {
			t.Fatal(err)
		}
		lives = append(lives, live())
		all, err := g.After(u, complete)
		if err != nil {
			t.Fatal(err)
		}
		alls = append(alls, all)
	}
	// head: 0 + embeddings' 10 elements; block: +6; embeddings: already live.
	if diff := cmp.Diff([]int64{4 * 10, 4 * 16, 4 * 16}, lives); diff != "" {
		t.Errorf("live Comm bytes after each BeforeBackward (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{2, 1, 0}, completed); diff != "" {
		t.Errorf("completion order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false, false, true}, alls); diff != "" {
		t.Errorf("pass complete after each AfterBackward (-want +got):\n%s", diff)
	}
	if !g.InBackward() || g.Backwards() != 0 {
		t.Errorf("before EndPass: InBackward %v Backwards %d, want true 0", g.InBackward(), g.Backwards())
	}
	g.EndPass()
	if g.InBackward() || g.Backwards() != 1 {
		t.Errorf("after EndPass: InBackward %v Backwards %d, want false 1", g.InBackward(), g.Backwards())
	}
	g.Release(1)
	g.Release(1) // a second release of the same unit is a no-op
	if got := live(); got != 4*10 {
		t.Errorf("live after releasing the block: %d bytes, want %d", got, 4*10)
	}
	g.ReleaseAll()
	if got := live(); got != 0 {
		t.Errorf("live after ReleaseAll: %d bytes, want 0", got)
	}
}

func TestUnitGradsErrors(t *testing.T) {
	t.Run("finished twice", func(t *testing.T) {
		g := NewUnitGrads("stage 3", mem.NewAccountant(0), tiedUnits())
		nop := func(int) error { return nil }
		if _, err := g.After(1, nop); err != nil {
			t.Fatal(err)
		}
		_, err := g.After(1, nop)
		if err == nil || err.Error() != `stage 3: unit "blocks.0" finished backward twice in one pass` {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("out of memory", func(t *testing.T) {
		acct := mem.NewAccountant(0)
		acct.SetCapacity(mem.Device, 4*12)
		g := NewUnitGrads("stage 2", acct, tiedUnits())
		if err := g.Before(1); err != nil { // 24 bytes
			t.Fatal(err)
		}
		err := g.Before(2) // the embeddings' 40 bytes do not fit
		if err == nil || !strings.HasPrefix(err.Error(), `stage 2: gradients of unit "embeddings": `) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("complete's error as it is", func(t *testing.T) {
		g := NewUnitGrads("stage 2", mem.NewAccountant(0), tiedUnits())
		want := errors.New("all-reduce failed")
		if _, err := g.After(1, func(int) error { return want }); err != want {
			t.Errorf("err = %v, want %v", err, want)
		}
	})
}
