package main

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
)

// TestLaunch: without launcher variables (or with stray ones) --nproc
// decides; torchrun is a world of one or a clear error; an explicit
// --nproc that disagrees with the launcher is reported. None of these
// cases reaches MPI.
func TestLaunch(t *testing.T) {
	ompi := func(rank, size int) map[string]string {
		return map[string]string{comm.EnvOMPIRank: strconv.Itoa(rank), comm.EnvOMPISize: strconv.Itoa(size),
			comm.EnvOMPILocalRank: strconv.Itoa(rank), comm.EnvOMPILocalSize: strconv.Itoa(size)}
	}
	for _, tc := range []struct {
		env      map[string]string
		nproc    int
		nprocSet bool
		size     int    // want, when no error
		err      string // want in the error
	}{
		{env: nil, nproc: 3, nprocSet: true, size: 3},
		{env: map[string]string{comm.EnvLocalRank: "0"}, nproc: 2, size: 2}, // not a job: RANK and WORLD_SIZE missing
		{env: map[string]string{comm.EnvRank: "0", comm.EnvWorldSize: "1"}, nproc: 1, size: 1},
		{env: map[string]string{comm.EnvRank: "1", comm.EnvWorldSize: "2"}, nproc: 1, err: "mpirun -np 2"},
		{env: map[string]string{comm.EnvRank: "0", comm.EnvWorldSize: "2"}, nproc: 4, nprocSet: true, err: "--nproc 4 conflicts with the world size 2"},
		{env: ompi(0, 2), nproc: 3, nprocSet: true, err: "--nproc 3 conflicts with the world size 2 that mpirun"},
		{env: map[string]string{comm.EnvOMPISize: "2"}, nproc: 1, err: "partial"},
		{env: nil, nproc: 0, nprocSet: true, err: "--nproc 0"},
		// torchrun's rendezvous pair must be whole (under mpirun it need
		// not: TestTrainMPIMasterAddr).
		{env: map[string]string{comm.EnvRank: "0", comm.EnvWorldSize: "1", comm.EnvMasterAddr: "node17"}, nproc: 1, err: "MASTER_ADDR is set but MASTER_PORT is not"},
	} {
		l, err := newLaunch(tc.env, tc.nproc, tc.nprocSet, time.Minute, io.Discard)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v --nproc %d: error %v, want %q", tc.env, tc.nproc, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%v --nproc %d: %v", tc.env, tc.nproc, err)
		case tc.err == "" && (l.size != tc.size || l.external() || len(l.ranks()) != tc.size):
			t.Errorf("%v --nproc %d: %d ranks, want %d in this process", tc.env, tc.nproc, l.size, tc.size)
		}
	}
}

// TestCommTimeoutFlag: dszero train refuses a --comm-timeout that is not
// positive, before training, as a usage error.
func TestCommTimeoutFlag(t *testing.T) {
	for _, arg := range []string{"0", "-5s"} {
		code, out, errs := runCLI("train", "--quiet", "--model", "tiny", "--steps", "1", "--comm-timeout", arg)
		if code != 2 || !strings.Contains(errs, "want a positive duration") || strings.Contains(out, "step ") {
			t.Errorf("--comm-timeout %s: exit %d\n%s%s", arg, code, out, errs)
		}
	}
	if code, _, errs := runCLI("train", "--comm-timeout", "soon"); code != 2 || !strings.Contains(errs, "invalid value \"soon\" for flag -comm-timeout") {
		t.Errorf("--comm-timeout soon: exit %d\n%s", code, errs)
	}
}
