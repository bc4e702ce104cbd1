package comm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Launcher is where a process learnt its rank.
type Launcher int

const (
	// NoLauncher: no launcher variables; one process, rank 0 of 1.
	NoLauncher Launcher = iota
	// Torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, as set by
	// torchrun and torch.distributed.launch, and by DeepSpeed's launcher
	// (which names the local size LOCAL_SIZE).
	Torchrun
	// OpenMPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, as set
	// by mpirun. When torchrun variables are present as well they must
	// agree (DeepSpeed's mpi_discovery writes them from these).
	OpenMPI
	numLaunchers
)

var launcherNames = [...]string{"none", "torchrun", "openmpi"}

func (l Launcher) String() string {
	if l < 0 || l >= numLaunchers {
		return fmt.Sprintf("Launcher(%d)", int(l))
	}
	return launcherNames[l]
}

// Env is a process's place in a multi-process job, read from the variables
// its launcher set.
type Env struct {
	Launcher       Launcher
	Rank           int // 0 ≤ Rank < WorldSize
	WorldSize      int
	LocalRank      int    // rank among the processes of this machine; -1 when the launcher did not say
	LocalWorldSize int    // processes on this machine; -1 when the launcher did not say
	MasterAddr     string // MASTER_ADDR, "" when unset (or ignored)
	MasterPort     int    // MASTER_PORT, 0 when unset (or ignored)
	// Warnings are problems ParseEnv let pass because they do not matter
	// to this launcher (MASTER_ADDR without MASTER_PORT under mpirun); a
	// launcher prints them once.
	Warnings []string
}

// The variables ParseEnv reads.
const (
	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
	EnvLocalRank      = "LOCAL_RANK"
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	EnvLocalSize      = "LOCAL_SIZE" // DeepSpeed's launcher's name for LOCAL_WORLD_SIZE
	EnvMasterAddr     = "MASTER_ADDR"
	EnvMasterPort     = "MASTER_PORT"
	EnvOMPIRank       = "OMPI_COMM_WORLD_RANK"
	EnvOMPISize       = "OMPI_COMM_WORLD_SIZE"
	EnvOMPILocalRank  = "OMPI_COMM_WORLD_LOCAL_RANK"
	EnvOMPILocalSize  = "OMPI_COMM_WORLD_LOCAL_SIZE"
)

// EnvMap turns os.Environ()'s "KEY=value" list into a map (a later entry
// wins, as in the environment itself).
func EnvMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// ParseEnv reads the launcher variables from env. It is pure: pass
// EnvMap(os.Environ()) in production and literal maps in tests.
//
// Rules, each broken one reported (all of them, joined):
//   - Every variable present must be a decimal integer: ranks ≥ 0, sizes ≥ 1,
//     the port in 1..65535.
//   - torchrun: RANK and WORLD_SIZE come together. LOCAL_RANK,
//     LOCAL_WORLD_SIZE and LOCAL_SIZE need them, a local size needs
//     LOCAL_RANK, and LOCAL_WORLD_SIZE and LOCAL_SIZE must agree. LOCAL_RANK
//     alone (torch.distributed.launch --use_env) leaves LocalWorldSize -1.
//   - Open MPI: all four OMPI_COMM_WORLD_* variables or none.
//   - Both: every torchrun value present must equal its Open MPI one.
//   - Consistency: Rank < WorldSize, LocalRank < LocalWorldSize ≤
//     WorldSize, LocalRank ≤ Rank, and WorldSize−Rank ≥
//     LocalWorldSize−LocalRank (a machine's local ranks are a subset of the
//     global ones, in the same order).
//   - MASTER_ADDR and MASTER_PORT come together, an address not empty, a
//     port in range. Under Open MPI, whose OMPI_COMM_WORLD_* variables
//     name the job, a broken rendezvous pair is a warning instead: many
//     clusters' (and DeepSpeed's) environments export MASTER_ADDR alone,
//     and mpirun passes it on. Both are then ignored (left empty).
//
// With no launcher variables the result is rank 0 of 1, local rank 0 of 1.
func ParseEnv(env map[string]string) (Env, error) {
	p := envParser{env: env}
	torch := p.torch()
	mpi := p.mpi()
	e := Env{Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1}
	switch {
	case mpi != nil:
		e.Launcher = OpenMPI
		e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize = mpi[0], mpi[1], mpi[2], mpi[3]
		if torch != nil {
			names := [4]string{EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalWorldSize}
			ompi := [4]string{EnvOMPIRank, EnvOMPISize, EnvOMPILocalRank, EnvOMPILocalSize}
			for i, v := range torch {
				if v >= 0 && v != mpi[i] {
					p.problem("%s=%d disagrees with %s=%d", names[i], v, ompi[i], mpi[i])
				}
			}
		}
	case torch != nil:
		e.Launcher = Torchrun
		e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize = torch[0], torch[1], torch[2], torch[3]
	}
	if e.Launcher != NoLauncher {
		p.consistent(e)
	}
	e.MasterAddr, e.MasterPort = p.master(e.Launcher == OpenMPI)
	e.Warnings = p.warnings
	if len(p.problems) > 0 {
		return Env{}, fmt.Errorf("comm: launcher environment: %w", errors.Join(p.problems...))
	}
	return e, nil
}

type envParser struct {
	env      map[string]string
	problems []error
	warnings []string
	bad      bool // some value did not parse: skip the consistency checks
}

func (p *envParser) problem(format string, args ...any) {
	p.problems = append(p.problems, fmt.Errorf(format, args...))
}

// int reads name as an integer ≥ lo; -1 when absent or invalid.
func (p *envParser) int(name string, lo int) (v int, present bool) {
	s, ok := p.env[name]
	if !ok {
		return -1, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case err != nil:
		p.problem("%s=%q is not an integer", name, s)
	case n < lo:
		p.problem("%s=%d must be at least %d", name, n, lo)
	default:
		return n, true
	}
	p.bad = true
	return -1, true
}

// torch returns rank, world, local rank, local size (-1 when absent), or nil
// when no torchrun variable is set.
func (p *envParser) torch() []int {
	rank, hasRank := p.int(EnvRank, 0)
	world, hasWorld := p.int(EnvWorldSize, 1)
	lrank, hasLRank := p.int(EnvLocalRank, 0)
	lws, hasLWS := p.int(EnvLocalWorldSize, 1)
	lsize, hasLSize := p.int(EnvLocalSize, 1)
	if !hasRank && !hasWorld && !hasLRank && !hasLWS && !hasLSize {
		return nil
	}
	if hasRank != hasWorld {
		set, unset := EnvRank, EnvWorldSize
		if hasWorld {
			set, unset = unset, set
		}
		p.problem("%s is set but %s is not", set, unset)
	}
	if !hasRank && !hasWorld {
		for _, v := range []struct {
			name string
			has  bool
		}{{EnvLocalRank, hasLRank}, {EnvLocalWorldSize, hasLWS}, {EnvLocalSize, hasLSize}} {
			if v.has {
				p.problem("%s is set but %s and %s are not", v.name, EnvRank, EnvWorldSize)
			}
		}
	}
	if hasLWS && hasLSize && lws >= 0 && lsize >= 0 && lws != lsize {
		p.problem("%s=%d disagrees with %s=%d", EnvLocalWorldSize, lws, EnvLocalSize, lsize)
	}
	if !hasLWS {
		lws = lsize
	}
	if (hasLWS || hasLSize) && !hasLRank {
		name := EnvLocalWorldSize
		if !hasLWS {
			name = EnvLocalSize
		}
		p.problem("%s is set but %s is not", name, EnvLocalRank)
	}
	return []int{rank, world, lrank, lws}
}

// mpi returns rank, size, local rank, local size, or nil when no
// OMPI_COMM_WORLD variable is set.
func (p *envParser) mpi() []int {
	names := []string{EnvOMPIRank, EnvOMPISize, EnvOMPILocalRank, EnvOMPILocalSize}
	lows := []int{0, 1, 0, 1}
	vals := make([]int, 4)
	var missing []string
	for i, name := range names {
		v, ok := p.int(name, lows[i])
		vals[i] = v
		if !ok {
			missing = append(missing, name)
		}
	}
	switch len(missing) {
	case len(names):
		return nil
	case 0:
		return vals
	}
	p.problem("Open MPI variables are partial: %s not set", strings.Join(missing, ", "))
	p.bad = true
	return vals
}

func (p *envParser) consistent(e Env) {
	if p.bad || e.Rank < 0 || e.WorldSize < 1 {
		return
	}
	if e.Rank >= e.WorldSize {
		p.problem("rank %d is not below the world size %d", e.Rank, e.WorldSize)
	}
	if e.LocalRank < 0 || e.LocalWorldSize < 1 {
		return
	}
	if e.LocalRank >= e.LocalWorldSize {
		p.problem("local rank %d is not below the local world size %d", e.LocalRank, e.LocalWorldSize)
	}
	if e.LocalWorldSize > e.WorldSize {
		p.problem("local world size %d exceeds the world size %d", e.LocalWorldSize, e.WorldSize)
	}
	if e.LocalRank > e.Rank {
		p.problem("local rank %d exceeds the rank %d", e.LocalRank, e.Rank)
	}
	if e.WorldSize-e.Rank < e.LocalWorldSize-e.LocalRank {
		p.problem("rank %d of %d cannot be local rank %d of %d: too few ranks after it", e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize)
	}
}

// master reads MASTER_ADDR and MASTER_PORT. With lenient (Open MPI, which
// does not use them) their problems are warnings and the pair is ignored.
func (p *envParser) master(lenient bool) (string, int) {
	addr, hasAddr := p.env[EnvMasterAddr]
	portStr, hasPort := p.env[EnvMasterPort]
	var problems []string
	port, err := strconv.Atoi(strings.TrimSpace(portStr))
	switch {
	case !hasPort:
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s=%q is not an integer", EnvMasterPort, portStr))
	case port < 1 || port > 65535:
		problems = append(problems, fmt.Sprintf("%s=%d is not a port (1..65535)", EnvMasterPort, port))
	}
	if hasAddr && strings.TrimSpace(addr) == "" {
		problems = append(problems, EnvMasterAddr+" is empty")
	}
	if hasAddr != hasPort {
		set, unset := EnvMasterAddr, EnvMasterPort
		if hasPort {
			set, unset = unset, set
		}
		problems = append(problems, fmt.Sprintf("%s is set but %s is not", set, unset))
	}
	switch {
	case len(problems) == 0:
		if !hasPort {
			port = 0
		}
		return strings.TrimSpace(addr), port
	case lenient:
		p.warnings = append(p.warnings, fmt.Sprintf("%s: ignored, since mpirun's OMPI_COMM_WORLD_* variables name the job",
			strings.Join(problems, "; ")))
	default:
		for _, m := range problems {
			p.problem("%s", m)
		}
	}
	return "", 0
}
