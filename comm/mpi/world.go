//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// initOnce is the package's one piece of process-wide state, because MPI
// itself is process-wide: MPI_Init_thread may be called once per process,
// and never again after MPI_Finalize (MPI-3.1 §8.7). Everything else lives
// in the World that Init returns.
var initOnce sync.Once

// World is this process's MPI library, from Init to Finalize, and its
// world communicator.
type World struct {
	opts     Options
	world    *communicator
	ctl      *control        // the control channel (control.go)
	finalize chan chan error // to the MPI main thread (see mainThread)

	mu        sync.Mutex
	comms     []*communicator // the world and every split, in creation order
	finalized bool

	abortOnce sync.Once
	aborting  chan struct{} // closed once MPI_Abort is scheduled
}

// Init initialises MPI (MPI_Init_thread) and returns the World, whose Comm
// is the world communicator: a private duplicate of MPI_COMM_WORLD, so
// that dszero's collectives never meet another library's messages. Call it
// once per process, in every process of the job (under mpirun), and
// Finalize before the process exits; a second call fails, since MPI can be
// initialised only once per process.
//
// Init asks for MPI_THREAD_MULTIPLE and fails when the library provides
// less: each communicator runs its collectives on its own goroutine, and the
// watchdog calls MPI_Abort while a collective may still be blocked, so MPI
// calls may come from several threads at once.
func Init(opts Options) (*World, error) {
	opts, err := opts.validate()
	if err != nil {
		return nil, err
	}
	first := false
	initOnce.Do(func() { first = true })
	if !first {
		return nil, errors.New("mpi: Init called a second time: MPI can be initialised only once per process; pass the *World along")
	}
	w := &World{opts: opts, finalize: make(chan chan error), aborting: make(chan struct{})}
	started := make(chan error)
	go w.mainThread(started)
	if err := <-started; err != nil {
		return nil, err
	}
	h, err := dupWorld()
	if err == nil {
		w.ctl, err = newControl(w)
	}
	if err == nil {
		w.world, err = w.newComm(h, "world", true, defaultMaxCount, defaultScratchMax, opts.Verify)
	}
	if err != nil {
		if w.ctl != nil {
			w.ctl.close()
		}
		reply := make(chan error)
		w.finalize <- reply
		return nil, errors.Join(fmt.Errorf("mpi: the world communicator: %w", err), <-reply)
	}
	return w, nil
}

// mainThread is the goroutine that initialises and finalises MPI. MPI wants
// MPI_Finalize on the thread that called MPI_Init_thread (its "main
// thread"), and a goroutine may move between threads, so this one stays
// locked to its thread from MPI_Init_thread until MPI_Finalize; the thread
// ends with it.
func (w *World) mainThread(started chan<- error) {
	runtime.LockOSThread()
	provided, multiple, err := mpiInit()
	if err != nil {
		started <- fmt.Errorf("mpi: %w", err)
		return
	}
	if !multiple {
		err = fmt.Errorf("mpi: the MPI library provides %s; dszero needs MPI_THREAD_MULTIPLE (each communicator's collectives run on their own thread, and the timeout watchdog calls MPI_Abort while one may be blocked): use an Open MPI built with thread support (Debian's is)", threadLevelName(provided))
		started <- errors.Join(err, mpiFinalize())
		return
	}
	started <- nil
	reply := <-w.finalize
	reply <- mpiFinalize()
}

// Comm is the world communicator: rank and size are MPI_COMM_WORLD's, the
// values mpirun also puts in OMPI_COMM_WORLD_RANK and _SIZE (comm.ParseEnv).
func (w *World) Comm() comm.Comm { return w.world }

// Finalize lets the collectives already issued on every communicator run to
// completion, closes the communicators (later calls fail with
// comm.ErrClosed), and finalises MPI (MPI_Finalize, a collective over the
// whole job: every process must call it). When a collective is stuck after
// a timeout, Finalize returns an error at once, without finalising: the job
// is being aborted.
func (w *World) Finalize() error {
	w.mu.Lock()
	if w.finalized {
		w.mu.Unlock()
		return errors.New("mpi: Finalize called twice")
	}
	w.finalized = true
	comms := w.comms
	w.mu.Unlock()
	for _, c := range comms {
		c.close()
	}
	for _, c := range comms {
		select {
		case <-c.exited:
		case <-w.aborting:
			return fmt.Errorf("mpi: not finalising: a collective failed and the job is being aborted (MPI_Abort in %v)", w.opts.AbortGrace)
		}
	}
	w.ctl.close()
	reply := make(chan error)
	w.finalize <- reply
	return <-reply
}

// register adds a new communicator for Finalize to close; after Finalize it
// refuses.
func (w *World) register(c *communicator) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finalized {
		return errors.New("mpi: communicator created after Finalize")
	}
	w.comms = append(w.comms, c)
	return nil
}

// abort schedules MPI_Abort(MPI_COMM_WORLD, AbortCode) after the grace
// period, once per process, and says why on Options.Log at once; with
// notify it also tells every other rank (the control channel's abort
// notice), naming culprits, the world ranks at fault, so that each fails
// its collectives with the same cause instead of waiting in them. MPI cannot
// cancel a blocked collective: the only way out that never hangs is to end
// the job. mpirun then kills every process and exits with AbortCode.
func (w *World) abort(err error, culprits []int, notify bool) {
	w.abortOnce.Do(func() {
		close(w.aborting)
		log := w.opts.Log
		if log == nil {
			log = os.Stderr
		}
		if notify {
			w.ctl.tellAll(message{Msg: err.Error(), Timeout: errors.Is(err, comm.ErrTimeout), Peers: culprits})
		}
		logAbort(log, err, w.opts.AbortGrace)
		time.AfterFunc(w.opts.AbortGrace, func() { mpiAbort(AbortCode) })
	})
}

// AwaitAbort is for a rank that is about to exit with an error: when a
// collective has failed and the job is being aborted, it blocks until
// MPI_Abort ends the process (Options.AbortGrace after the failure), so
// that the other ranks, told by this one, have the time to report the
// failure too; otherwise it returns at once.
func (w *World) AwaitAbort() {
	select {
	case <-w.aborting:
	default:
		return
	}
	// MPI_Abort ends the process before this returns; the bound only keeps
	// a misbehaving MPI from turning an error into a hang.
	time.Sleep(w.opts.AbortGrace + 30*time.Second)
}

// relay handles another rank's abort notice, on a goroutine of its own
// (breaking may wait, see fail): every communicator of this rank breaks
// with its cause, and this rank's own MPI_Abort is scheduled (its peers may
// be blocked in collectives with it).
func (w *World) relay(from int, m message) {
	go w.relayed(from, m)
}

func (w *World) relayed(from int, m message) {
	kind, peers := comm.ErrRankFailed, []int{from}
	if m.Timeout {
		kind, peers = comm.ErrTimeout, m.Peers
	}
	msg := fmt.Sprintf("world rank %d gave up: %s", from, m.Msg)
	w.mu.Lock()
	comms := slices.Clone(w.comms)
	w.mu.Unlock()
	var wg sync.WaitGroup // each break may wait up to relayWait: in parallel
	for _, c := range comms {
		var in []int // the ranks at fault that are members of c, as ranks of c
		for r, wr := range c.members {
			if slices.Contains(peers, wr) {
				in = append(in, r)
			}
		}
		wg.Go(func() { c.breakWith(&fault{peers: in, relayed: true, err: &comm.FaultError{Msg: msg, Kind: kind}}) })
	}
	wg.Wait()
	w.abort(fmt.Errorf("mpi: %s", msg), nil, false)
}

// progress is how far this rank got on the communicator with the given id
// (see newComm) — Known is false when it has none of that id — and the
// collective it has been waiting in longest.
func (w *World) progress(id string) progress {
	w.mu.Lock()
	comms := slices.Clone(w.comms)
	w.mu.Unlock()
	var p progress
	var oldest time.Time
	now := time.Now()
	for _, c := range comms {
		c.mu.Lock()
		if c.id == id {
			p.Known, p.Issued, p.Started, p.Finished, p.Broken = true, c.issued, c.started, c.finished, c.fault != nil
		}
		if x := c.current; x != nil && (p.Waiting == nil || c.startedAt.Before(oldest)) {
			oldest = c.startedAt
			p.Waiting = &waiting{Comm: c.id, Name: c.name, Members: c.members, Kind: x.Kind, Seq: x.seq, For: now.Sub(c.startedAt)}
		}
		c.mu.Unlock()
	}
	return p
}

func logAbort(log io.Writer, err error, grace time.Duration) {
	fmt.Fprintf(log, "%v\nmpi: MPI cannot cancel a collective: aborting the job in %v (MPI_Abort(MPI_COMM_WORLD, %d))\n", err, grace, AbortCode)
}
