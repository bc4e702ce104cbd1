//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dszero/dszero/comm"
)

// A scenario is a 2-rank job that must fail, never hang: TestMPI runs it
// under mpirun and checks the job's output and exit status.
type scenario struct {
	name string
	want []string // in the job's output
	not  []string // not in the job's output
	code int      // the job's exit status; 0: any failure
	opts Options
	run  func(w *World) error
}

var scenarios = []scenario{
	{
		// Rank 1 never arrives at the second all-reduce: rank 0's
		// watchdog returns the error, then aborts the job.
		name: "timeout",
		want: []string{
			"Wait: comm: all_reduce #2 on world (rank 0 of 2): timed out after 1s",
			"aborting the job in 300ms (MPI_Abort(MPI_COMM_WORLD, 124))",
			"is-timeout=true",
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
			fmt.Printf("Wait: %v\nis-timeout=%v\n", err, errors.Is(err, comm.ErrTimeout))
			if c.AllReduce(ctx, comm.F32(make([]float32, 10)), comm.Sum).Wait() == nil {
				fmt.Println("a collective after the timeout succeeded")
			}
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

// runScenario is one rank of a scenario job; it returns the exit status.
func runScenario(name string) int {
	for _, sc := range scenarios {
		if sc.name != name {
			continue
		}
		w, err := Init(sc.opts)
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
