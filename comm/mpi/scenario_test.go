//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/dszero/dszero/comm"
)

// A scenario is a job (of 2 ranks unless np says) that must fail, never
// hang: TestMPI runs it under mpirun and checks the job's output and exit
// status.
type scenario struct {
	name string
	np   int
	want []string // in the job's output
	not  []string // not in the job's output
	code int      // the job's exit status; 0: any failure
	opts Options
	// rankOpts, when set, are the options of the ranks it names instead.
	rankOpts map[int]Options
	run      func(w *World) error
}

var scenarios = []scenario{
	{
		// Rank 1 never arrives at the second all-reduce (it sleeps, as if
		// computing): rank 0's watchdog returns the error, naming it and
		// what it does instead, then aborts the job.
		name: "timeout",
		want: []string{
			"Wait: comm: all_reduce #2 on world (rank 0 of 2): timed out after 1s: rank 1 did not arrive (busy outside collectives: the last it issued here is #1)",
			"aborting the job in 300ms (MPI_Abort(MPI_COMM_WORLD, 124))",
			"is-timeout=true peers=[1]",
		},
		not:  []string{"a collective after the timeout succeeded"},
		code: AbortCode,
		opts: Options{Timeout: time.Second, AbortGrace: 300 * time.Millisecond},
		run: func(w *World) error {
			c := w.Comm()
			ctx := context.Background()
			if err := c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait(); err != nil {
				return err
			}
			if c.Rank() == 1 {
				time.Sleep(time.Minute)
			}
			err := c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait()
			fmt.Printf("Wait: %v\nis-timeout=%v peers=%v\n", err, errors.Is(err, comm.ErrTimeout), peersOf(err))
			if c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait() == nil {
				fmt.Println("a collective after the timeout succeeded")
			}
			time.Sleep(time.Minute) // until MPI_Abort
			return nil
		},
	},
	{
		// Rank 1 stops (SIGSTOP, as kill -STOP or a debugger would) before
		// the second all-reduce: it cannot answer the control channel
		// either, so rank 0 names it as stopped or hung, and the job still
		// ends (mpirun kills the stopped process too).
		name: "stopped",
		want: []string{
			"rank 0 Wait: comm: all_reduce #2 on world (rank 0 of 2): timed out after 2s: rank 1 did not arrive (stopped or hung: no answer within 1s)",
			"rank 0 is-timeout=true peers=[1]",
			"MPI_Abort",
		},
		code: AbortCode,
		opts: Options{Timeout: 2 * time.Second, AbortGrace: 300 * time.Millisecond},
		run:  stopRank1,
	},
	{
		// The same with 3 ranks: both live ranks report the stopped one,
		// rank 2 whether its own watchdog fires first or rank 0's abort
		// notice reaches it first.
		name: "stopped-np3",
		np:   3,
		want: []string{
			"rank 0 Wait: comm: all_reduce #2 on world (rank 0 of 3): timed out after 2s: rank 1 did not arrive (stopped or hung",
			"rank 0 is-timeout=true peers=[1]",
			"rank 2 Wait: comm: all_reduce #2 on world (rank 2 of 3): ",
			"rank 2 is-timeout=true peers=[1]",
		},
		not:  []string{"rank 2 did not arrive", "rank 0 did not arrive"},
		code: AbortCode,
		opts: Options{Timeout: 2 * time.Second, AbortGrace: time.Second},
		run:  stopRank1,
	},
	{
		// Rank 2 would wait 50s: rank 0's abort notice fails its
		// collective at once, naming the stopped rank, so that it reports
		// the failure before MPI_Abort ends the job.
		name: "stopped-relayed",
		np:   3,
		want: []string{
			"rank 0 Wait: comm: all_reduce #2 on world (rank 0 of 3): timed out after 2s: rank 1 did not arrive (stopped or hung",
			"rank 2 Wait: comm: all_reduce #2 on world (rank 2 of 3): world rank 0 gave up: comm: all_reduce #2 on world (rank 0 of 3): timed out after 2s: rank 1 did not arrive",
			"rank 2 is-timeout=true peers=[1]",
		},
		code:     AbortCode,
		opts:     Options{Timeout: 2 * time.Second, AbortGrace: 2 * time.Second},
		rankOpts: map[int]Options{2: {Timeout: 50 * time.Second, AbortGrace: 2 * time.Second}},
		run:      stopRank1,
	},
	{
		// Rank 1 is late on group [0 1] because it waits, on group [1 2],
		// for rank 2, which stopped: rank 0's error follows rank 1 there
		// and names rank 2, the root of the stall.
		name: "stopped-behind",
		np:   3,
		want: []string{
			"rank 0 Wait: comm: all_reduce #1 on group[0 1] (rank 0 of 2): timed out after 2s: rank 1 (world rank 1) did not arrive (waiting in all_reduce #1 on group[1 2] for ",
			", where rank 1 (world rank 2) did not arrive (stopped or hung: no answer within 1s))",
			"rank 1 Wait: comm: all_reduce #1 on group[1 2] (rank 0 of 2): world rank 0 gave up: ",
			"rank 1 is-timeout=true peers=[1]", // world rank 2, the one that stopped
		},
		code:     AbortCode,
		opts:     Options{Timeout: 2 * time.Second, AbortGrace: 2 * time.Second},
		rankOpts: map[int]Options{1: {Timeout: 50 * time.Second, AbortGrace: 2 * time.Second}},
		run: func(w *World) error {
			c := w.Comm()
			ctx := context.Background()
			a, err := comm.NewGroup(ctx, c, []int{0, 1})
			if err != nil {
				return err
			}
			b, err := comm.NewGroup(ctx, c, []int{1, 2})
			if err != nil {
				return err
			}
			var g comm.Comm
			switch c.Rank() {
			case 0:
				g = a
			case 1:
				g = b
			case 2:
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				time.Sleep(time.Minute)
				return nil
			}
			err = g.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait()
			fmt.Printf("rank %d Wait: %v\nrank %d is-timeout=%v peers=%v\n", c.Rank(), err, c.Rank(), errors.Is(err, comm.ErrTimeout), peersOf(err))
			time.Sleep(time.Minute) // until MPI_Abort
			return nil
		},
	},
	{
		// Rank 0 cancels its context during a collective rank 1 never
		// joins: the collective fails at once and the job is aborted.
		name: "cancel",
		want: []string{
			"Wait: comm: broadcast #1 on world (rank 0 of 2): rank 0 failed: context canceled",
			"is-rank-failed=true",
			"MPI_Abort",
		},
		code: AbortCode,
		opts: Options{AbortGrace: 300 * time.Millisecond},
		run: func(w *World) error {
			c := w.Comm()
			if c.Rank() == 1 {
				time.Sleep(time.Minute)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			err := c.Broadcast(ctx, comm.F32(make([]float32, 10)), 1).Wait()
			fmt.Printf("Wait: %v\nis-rank-failed=%v\n", err, errors.Is(err, comm.ErrRankFailed))
			time.Sleep(time.Minute)
			return nil
		},
	},
	{
		// Rank 1 dies inside the job; mpirun ends the whole job long
		// before rank 0's 50 s timeout.
		name: "exit",
		opts: Options{Timeout: 50 * time.Second},
		run: func(w *World) error {
			c := w.Comm()
			if c.Rank() == 1 {
				time.Sleep(200 * time.Millisecond)
				os.Exit(3)
			}
			return c.AllReduce(context.Background(), comm.F32(make([]float32, 10)), comm.Sum).Wait()
		},
	},
}

// stopRank1: one all-reduce, then rank 1 stops itself for good while the
// others issue the second; they print what their Wait returned.
func stopRank1(w *World) error {
	c := w.Comm()
	ctx := context.Background()
	if err := c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait(); err != nil {
		return err
	}
	if c.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute) // not reached before mpirun kills the job
		return nil
	}
	err := c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait()
	fmt.Printf("rank %d Wait: %v\nrank %d is-timeout=%v peers=%v\n", c.Rank(), err, c.Rank(), errors.Is(err, comm.ErrTimeout), peersOf(err))
	time.Sleep(time.Minute) // until MPI_Abort
	return nil
}

// rankFromEnv is this process's rank, as mpirun says (-1 when it does
// not).
func rankFromEnv() int {
	r, err := strconv.Atoi(os.Getenv(comm.EnvOMPIRank))
	if err != nil {
		return -1
	}
	return r
}

// peersOf is a *comm.Error's Peers.
func peersOf(err error) []int {
	var ce *comm.Error
	if errors.As(err, &ce) {
		return ce.Peers
	}
	return nil
}

// runScenario is one rank of a scenario job; it returns the exit status.
func runScenario(name string) int {
	for _, sc := range scenarios {
		if sc.name != name {
			continue
		}
		opts := sc.opts
		if o, ok := sc.rankOpts[rankFromEnv()]; ok {
			opts = o
		}
		w, err := Init(opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := sc.run(w); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := w.Finalize(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "no scenario %q\n", name)
	return 2
}
