package inproc_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
)

func ExampleWorld_Run() {
	ctx := context.Background()
	w := inproc.New(3, inproc.Options{Timeout: time.Minute})
	sums := make([][]float32, 3)
	err := w.Run(func(c comm.Comm) error {
		grad := []float32{float32(c.Rank()), 1}
		h := c.AllReduce(ctx, comm.F32(grad), comm.Sum) // grad belongs to c until Wait
		if err := h.Wait(); err != nil {
			return err
		}
		sums[c.Rank()] = grad
		return nil
	})
	fmt.Println(sums, err)
	// Output: [[3 3] [3 3] [3 3]] <nil>
}

func ExampleWorld_Run_failure() {
	ctx := context.Background()
	w := inproc.New(2, inproc.Options{Timeout: time.Minute})
	w.Run(func(c comm.Comm) error {
		if c.Rank() == 1 {
			return errors.New("out of memory")
		}
		err := c.AllReduce(ctx, comm.F32(make([]float32, 4)), comm.Avg).Wait()
		var ce *comm.Error
		if errors.As(err, &ce) {
			fmt.Println(err)
			fmt.Println(ce.Kind, ce.Seq, ce.Peers, errors.Is(err, comm.ErrRankFailed))
		}
		return err
	})
	// Output:
	// comm: all_reduce #1 on world (rank 0 of 2): rank 1 failed: out of memory
	// all_reduce 1 [1] true
}
