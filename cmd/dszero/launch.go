package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/mpi"
)

// errNoMPI is what an Open MPI launch says in a binary built without the
// mpi build tag.
var errNoMPI = errors.New("started by mpirun, but this dszero was built without MPI support: go build -tags mpi ./cmd/dszero")

// launch is how this process takes part in training: either it runs every
// rank itself (--nproc, the in-process backend), or a launcher started it
// as one rank of a job of several processes.
type launch struct {
	env   comm.Env   // the launcher's variables; NoLauncher for --nproc
	world *mpi.World // Open MPI, when mpirun started this process; nil otherwise
	size  int        // ranks in the job: the plan's world size
}

// newLaunch reads the launcher's variables from environ (comm.EnvMap of
// os.Environ()). They count only when they name a job: Open MPI's
// OMPI_COMM_WORLD_SIZE, or torchrun's WORLD_SIZE with RANK; otherwise the
// job is --nproc ranks in this process. Under a launcher the world size is
// the launcher's, and an explicit --nproc that differs is an error. Open
// MPI initialises MPI here (call finalize at the end) with timeout
// (--comm-timeout; 0: comm.DefaultTimeout) bounding every collective;
// rank 0 writes the environment's warnings to warn. torchrun is accepted
// for a world of one only, since dszero has no TCP rendezvous yet.
func newLaunch(environ map[string]string, nproc int, nprocSet bool, timeout time.Duration, warn io.Writer) (*launch, error) {
	_, ompi := environ[comm.EnvOMPISize]
	_, rank := environ[comm.EnvRank]
	_, size := environ[comm.EnvWorldSize]
	if !ompi && !(rank && size) {
		if nproc < 1 {
			return nil, fmt.Errorf("--nproc %d: want at least 1 rank", nproc)
		}
		return &launch{env: comm.Env{WorldSize: nproc, LocalWorldSize: nproc}, size: nproc}, nil
	}
	env, err := comm.ParseEnv(environ)
	if err != nil {
		return nil, err
	}
	if env.Rank == 0 {
		for _, w := range env.Warnings {
			fmt.Fprintf(warn, "dszero train: warning: %s\n", w)
		}
	}
	l := &launch{env: env, size: env.WorldSize}
	if nprocSet && nproc != env.WorldSize {
		return nil, fmt.Errorf("--nproc %d conflicts with the world size %d that %s set: each process it started is one rank; drop --nproc", nproc, env.WorldSize, launcherName(env.Launcher))
	}
	switch {
	case env.Launcher == comm.Torchrun && env.WorldSize == 1:
		return l, nil
	case env.Launcher == comm.Torchrun:
		return nil, fmt.Errorf("started by torchrun or DeepSpeed's launcher as rank %d of %d, but dszero has no TCP rendezvous yet: use mpirun -np %d dszero train … (built with -tags mpi), or dszero train --nproc %d in one process",
			env.Rank, env.WorldSize, env.WorldSize, env.WorldSize)
	case !mpiBuilt:
		return nil, errNoMPI
	}
	if l.world, err = mpi.Init(mpi.Options{Timeout: timeout}); err != nil {
		return nil, err
	}
	if c := l.world.Comm(); c.Rank() != env.Rank || c.Size() != env.WorldSize {
		err := fmt.Errorf("MPI says rank %d of %d, the environment rank %d of %d", c.Rank(), c.Size(), env.Rank, env.WorldSize)
		return nil, errors.Join(err, l.world.Finalize())
	}
	return l, nil
}

func launcherName(l comm.Launcher) string {
	if l == comm.OpenMPI {
		return "mpirun (" + comm.EnvOMPISize + ")"
	}
	return "the launcher (" + comm.EnvWorldSize + ")"
}

// external reports whether this process is one rank of a launched job
// rather than all of them.
func (l *launch) external() bool { return l.world != nil }

// comm is this process's communicator when it is one rank of a launched
// job; nil when train.Run runs the ranks in-process.
func (l *launch) comm() comm.Comm {
	if l.world == nil {
		return nil
	}
	return l.world.Comm()
}

// ranks are the ranks this process runs: all of them, or its own.
func (l *launch) ranks() []int {
	if l.external() {
		return []int{l.env.Rank}
	}
	r := make([]int, l.size)
	for i := range r {
		r[i] = i
	}
	return r
}

// lead reports whether this process prints and logs: rank 0's, or the
// only one.
func (l *launch) lead() bool { return !l.external() || l.env.Rank == 0 }

// finalize ends MPI, collectively; a no-op without it. Call it on success
// only: a rank that fails exits without it (after awaitAbort), so that
// mpirun ends the whole job at once instead of the other ranks waiting in
// MPI_Finalize or in a collective until their timeout.
func (l *launch) finalize() error {
	if l.world == nil {
		return nil
	}
	return l.world.Finalize()
}

// awaitAbort is for a rank that failed, after it has printed why: when a
// collective failed (a timeout, a rank that stopped) the job is being
// aborted, and it waits for MPI_Abort, so that the other ranks, told of the
// failure, print theirs too before mpirun ends the job; otherwise, and
// without MPI, it returns at once.
func (l *launch) awaitAbort() {
	if l.world != nil {
		l.world.AwaitAbort()
	}
}
