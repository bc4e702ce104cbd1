package nccl_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/comm/nccl/fakenccl"
)

// Join: the launcher variables, the rendezvous through rank 0's store,
// the NCCL id from rank 0 (the fake's ids name its worlds, so a wrong id
// would make a separate world that never completes), and a collective.
func TestJoinFromTheLauncherEnvironment(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	fake := fakenccl.New(fakenccl.Options{})
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			env, err := comm.ParseEnv(map[string]string{"RANK": fmt.Sprint(r), "WORLD_SIZE": fmt.Sprint(n), "LOCAL_RANK": fmt.Sprint(r),
				"LOCAL_WORLD_SIZE": fmt.Sprint(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": fmt.Sprint(port)})
			if err != nil {
				errs[r] = err
				return
			}
			lib, dev := fake.Rank()
			ctx := context.Background()
			j, err := nccl.Join(ctx, env, nccl.Options{Lib: lib, Device: dev, Timeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			x := []float32{float32(r + 1)}
			if err := j.Comm().AllReduce(ctx, comm.F32(x), comm.Sum).Wait(); err != nil {
				errs[r] = err
			} else if x[0] != 6 {
				errs[r] = fmt.Errorf("sum %v, want 6", x[0])
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := j.Close(cctx); err != nil && errs[r] == nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	noErrors(t, errs)
	if got := fake.Calls()["ncclGetUniqueId"]; got != 1 {
		t.Errorf("%d unique ids made, want 1 (rank 0's)", got)
	}
}
