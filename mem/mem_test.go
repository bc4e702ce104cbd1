package mem

import (
	"errors"
	"strings"
	"testing"
)

func TestPeakAndRelease(t *testing.T) {
	a := NewAccountant(3)
	x, err := a.F32(Activations, Device, 100)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.U16(Params16, Device, 10)
	if err != nil {
		t.Fatal(err)
	}
	a.FreeF32(Activations, Device, x)
	s := a.Snapshot()
	if got := s.PeakBytes(Device, Activations); got != 400 {
		t.Errorf("peak activations = %d, want 400", got)
	}
	if got := s.LiveBytes(Device, Activations); got != 0 {
		t.Errorf("live activations = %d, want 0", got)
	}
	if s.PeakTotal[Device] != 420 || s.LiveTotal[Device] != 20 {
		t.Errorf("totals peak=%d live=%d, want 420 20", s.PeakTotal[Device], s.LiveTotal[Device])
	}
	a.FreeU16(Params16, Device, y)
}

func TestCapacityFailsLikeOOM(t *testing.T) {
	a := NewAccountant(1)
	a.SetCapacity(Device, 1000)
	if _, err := a.F32(OptimState, Device, 200); err != nil {
		t.Fatal(err)
	}
	_, err := a.F32(Activations, Device, 100)
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("want OOMError, got %v", err)
	}
	for _, want := range []string{"rank 1", "activations", "400 B", "optim_state 800 B", "1000 B"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if s := a.Snapshot(); s.LiveBytes(Device, Activations) != 0 {
		t.Errorf("failed allocation was accounted")
	}
	// Other tiers are not limited by the device budget.
	if _, err := a.F32(OptimState, PinnedHost, 1000); err != nil {
		t.Errorf("pinned host allocation failed: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 3 << 30: "3.00 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
