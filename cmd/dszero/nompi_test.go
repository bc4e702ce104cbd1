//go:build !mpi

package main

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
)

// TestTrainWithoutMPI: under mpirun, a dszero built without the mpi tag
// says how to rebuild.
func TestTrainWithoutMPI(t *testing.T) {
	for k, v := range map[string]string{comm.EnvOMPIRank: "0", comm.EnvOMPISize: "2", comm.EnvOMPILocalRank: "0", comm.EnvOMPILocalSize: "2"} {
		t.Setenv(k, v)
	}
	code, out, errs := runCLI("train", "--quiet", "--model", "tiny", "--steps", "1")
	if code != 1 || !strings.Contains(errs, "this dszero was built without MPI support: go build -tags mpi ./cmd/dszero") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
}

// TestTrainMasterAddrUnderMPIWarns: under mpirun a MASTER_ADDR without
// MASTER_PORT is a warning (the launch then stops only for want of MPI
// here; TestTrainMPIMasterAddr trains with it under the mpi tag).
func TestTrainMasterAddrUnderMPIWarns(t *testing.T) {
	for k, v := range map[string]string{comm.EnvOMPIRank: "0", comm.EnvOMPISize: "2", comm.EnvOMPILocalRank: "0", comm.EnvOMPILocalSize: "2", comm.EnvMasterAddr: "node17"} {
		t.Setenv(k, v)
	}
	code, out, errs := runCLI("train", "--quiet", "--model", "tiny", "--steps", "1")
	if code != 1 || !strings.Contains(errs, "dszero train: warning: MASTER_ADDR is set but MASTER_PORT is not: ignored") ||
		!strings.Contains(errs, "built without MPI support") || strings.Contains(errs, "launcher environment") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
}
