//go:build !mpi

package mpi

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStub: without the mpi tag, Init says how to get MPI support.
func TestStub(t *testing.T) {
	w, err := Init(Options{})
	if w != nil || !errors.Is(err, ErrNoMPI) {
		t.Fatalf("Init = %v, %v; want nil, ErrNoMPI", w, err)
	}
	for _, want := range []string{"built without MPI support", "-tags mpi", "openmpi-bin libopenmpi-dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := Init(Options{Timeout: -time.Second}); err == nil || errors.Is(err, ErrNoMPI) {
		t.Errorf("Init with a negative timeout = %v; want the option's error", err)
	}
}
