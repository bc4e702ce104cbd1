//go:build mpi

package mpi

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/device"
)

// How the tests run. `go test -tags mpi` starts this binary as one plain
// process: TestMPI then runs the binary again under
//
//	mpirun --allow-run-as-root --oversubscribe -np N <binary> -test.run ^TestRanks$
//
// for N = 2 and 3, and once per failure scenario. Under mpirun
// (OMPI_COMM_WORLD_SIZE is set) TestMain initialises MPI once, the rank
// tests run on every rank in the same order, and TestMain finalises MPI.

// world is the MPI world of a rank under mpirun; nil in the launching
// process.
var world *World

// scenarioVar selects a failure scenario for a job that TestMPI launches.
const scenarioVar = "DSZERO_MPI_TEST_SCENARIO"

func underMPI() bool { return os.Getenv(comm.EnvOMPISize) != "" }

func TestMain(m *testing.M) {
	if !underMPI() {
		os.Exit(m.Run())
	}
	if s := os.Getenv(scenarioVar); s != "" {
		os.Exit(runScenario(s))
	}
	flag.Parse()
	w, err := Init(Options{Timeout: 20 * time.Second, Verify: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	world = w
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" && w.Comm().Rank() != 0 {
		os.Stdout, _ = os.Open(os.DevNull) // one rank reports the benchmarks
	}
	code := m.Run()
	if err := w.Finalize(); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", w.Comm().Rank(), err)
		code = 1
	}
	os.Exit(code)
}

// mpirun is the launcher command for n ranks of this test binary.
func mpirun(ctx context.Context, t testing.TB, n int, args ...string) *exec.Cmd {
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) to run the MPI tests")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(n), self}, args...)
	return exec.CommandContext(ctx, path, full...)
}

// TestMPI launches the rank tests under mpirun with 2 and 3 ranks, and the
// failure scenarios.
func TestMPI(t *testing.T) {
	if underMPI() {
		t.Skip("launcher test; already under mpirun")
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := mpirun(ctx, t, n, "-test.run", "^TestRanks$", "-test.timeout", "80s")
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v after %v\n%s", cmd, err, time.Since(start).Round(time.Millisecond), out)
			}
			t.Logf("%d ranks passed in %v", n, time.Since(start).Round(time.Millisecond))
		})
	}
	for _, sc := range scenarios {
		t.Run("scenario="+sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			np := sc.np
			if np == 0 {
				np = 2
			}
			cmd := mpirun(ctx, t, np, "-test.run", "^$")
			cmd.Env = append(os.Environ(), scenarioVar+"="+sc.name)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || ctx.Err() != nil {
				t.Fatalf("%v: want a failed job, got %v after %v\n%s", cmd, err, took, out)
			}
			for _, want := range sc.want {
				if !bytes.Contains(out, []byte(want)) {
					t.Errorf("output lacks %q", want)
				}
			}
			for _, bad := range append(sc.not, "WARNING: DATA RACE") { // under -race
				if bytes.Contains(out, []byte(bad)) {
					t.Errorf("output has %q", bad)
				}
			}
			if sc.code != 0 && exit.ExitCode() != sc.code {
				t.Errorf("exit status %d, want %d", exit.ExitCode(), sc.code)
			}
			if t.Failed() {
				t.Logf("%v (exit %d after %v):\n%s", cmd, exit.ExitCode(), took, out)
			} else {
				t.Logf("job failed as expected after %v (exit %d)", took.Round(time.Millisecond), exit.ExitCode())
			}
		})
	}
}

// rankTest skips t unless it runs on a rank under mpirun.
func rankTest(t *testing.T) comm.Comm {
	if world == nil {
		t.Skip("runs on the ranks of an mpirun job; TestMPI launches it")
	}
	return world.Comm()
}

// TestRanks is every rank's part. Its subtests run in the same order on
// every rank; each issues the same collectives everywhere.
func TestRanks(t *testing.T) {
	c := rankTest(t)
	ctx := context.Background()
	n, me := c.Size(), c.Rank()

	t.Run("world", func(t *testing.T) {
		if err := commtest.Check(ctx, c, commtest.Cases(n)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("inproc-bits", func(t *testing.T) { checkInproc(t, c) })
	t.Run("all_to_all", func(t *testing.T) {
		if err := commtest.CheckAllToAll(ctx, c.(comm.AllToAller)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("compressed", func(t *testing.T) {
		if err := commtest.CheckCompressed(ctx, c); err != nil {
			t.Fatal(err)
		}
	})

	// Split by parity, ordered by descending world rank: np=3 makes
	// {2, 0} and {1}.
	t.Run("split", func(t *testing.T) {
		sub, err := c.Split(ctx, me%2, -me)
		if err != nil {
			t.Fatal(err)
		}
		var members []int
		for r := n - 1; r >= 0; r-- {
			if r%2 == me%2 {
				members = append(members, r)
			}
		}
		if sub.Size() != len(members) || members[sub.Rank()] != me {
			t.Fatalf("split: rank %d of %d; want place %d in %v", sub.Rank(), sub.Size(), me, members)
		}
		if got, want := sub.(*communicator).name, "group"+fmt.Sprint(members); got != want {
			t.Errorf("name %q, want %q", got, want)
		}
		if err := commtest.Check(ctx, sub, commtest.Cases(sub.Size())); err != nil {
			t.Fatal(err)
		}
		checkInproc(t, sub)
	})

	t.Run("split-nocolor", func(t *testing.T) {
		color := 0
		if me == 0 {
			color = comm.NoColor
		}
		sub, err := c.Split(ctx, color, me)
		if err != nil {
			t.Fatal(err)
		}
		if me == 0 {
			if sub != nil {
				t.Fatalf("NoColor gave %v", sub)
			}
			return
		}
		if sub.Size() != n-1 || sub.Rank() != me-1 {
			t.Fatalf("rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), me-1, n-1)
		}
		if err := commtest.Check(ctx, sub, commtest.Cases(sub.Size())[:40]); err != nil {
			t.Fatal(err)
		}
	})

	// Segments: the suite again with at most 100 elements per MPI call,
	// so every collective above one chunk of 100/n is cut.
	t.Run("segmented", func(t *testing.T) {
		sub, err := c.Split(ctx, 0, me)
		if err != nil {
			t.Fatal(err)
		}
		sub.(*communicator).maxCount = 100
		if err := commtest.Check(ctx, sub, commtest.Cases(n)); err != nil {
			t.Fatal(err)
		}
		checkInproc(t, sub)
	})

	// Scratch: the suite again with at most 30 elements of scratch per
	// collective, so that reductions are cut into segments well within
	// maxCount (sent from in itself, not packed).
	t.Run("scratch-bounded", func(t *testing.T) {
		sub, err := c.Split(ctx, 0, me)
		if err != nil {
			t.Fatal(err)
		}
		sub.(*communicator).scratchMax = 30
		if err := commtest.Check(ctx, sub, commtest.Cases(n)); err != nil {
			t.Fatal(err)
		}
		checkInproc(t, sub)
	})

	t.Run("async", func(t *testing.T) {
		const k, m = 8, 37
		bufs := make([][]float32, k)
		gathered := make([][]float32, k)
		var hs []comm.Handle
		for i := range bufs {
			bufs[i] = make([]float32, m)
			for j := range bufs[i] {
				bufs[i][j] = float32(i*1000 + j + me)
			}
			hs = append(hs, c.AllReduce(ctx, comm.F32(bufs[i]), comm.Sum))
			gathered[i] = make([]float32, n)
			hs = append(hs, c.AllGather(ctx, comm.F32(gathered[i]), comm.F32([]float32{float32(i + me)})))
		}
		if err := comm.WaitAll(hs...); err != nil {
			t.Fatal(err)
		}
		for i := range bufs {
			for j, got := range bufs[i] {
				if want := float32(n*(i*1000+j) + n*(n-1)/2); got != want {
					t.Fatalf("buffer %d[%d] = %v, want %v", i, j, got, want)
				}
			}
			for r, got := range gathered[i] {
				if got != float32(i+r) {
					t.Fatalf("gathered %d[%d] = %v, want %v", i, r, got, i+r)
				}
			}
		}
	})

	// Two communicators issued in opposite orders on odd and even ranks:
	// each has its own worker, so neither waits for the other.
	t.Run("cross-order", func(t *testing.T) {
		a, err := c.Split(ctx, 0, me)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Split(ctx, 0, me)
		if err != nil {
			t.Fatal(err)
		}
		x, y := []float32{1}, []float32{2} // a sums x, b sums y
		var hs [2]comm.Handle
		if me%2 == 0 {
			hs[0] = a.AllReduce(ctx, comm.F32(x), comm.Sum)
			hs[1] = b.AllReduce(ctx, comm.F32(y), comm.Sum)
		} else {
			hs[1] = b.AllReduce(ctx, comm.F32(y), comm.Sum)
			hs[0] = a.AllReduce(ctx, comm.F32(x), comm.Sum)
		}
		if err := comm.WaitAll(hs[:]...); err != nil {
			t.Fatal(err)
		}
		if x[0] != float32(n) || y[0] != float32(2*n) {
			t.Fatalf("sums %v %v, want %d %d", x, y, n, 2*n)
		}
	})

	// Go's SIGSEGV handler survives MPI_Init: a nil dereference is still a
	// panic that recover catches, not Open MPI's stack trace and abort.
	t.Run("go-signals", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		t.Log(*nilPointer())
	})

	// Verify: rank 0 issues a different length; every rank gets the same
	// mismatch, the communicator stays broken, and the job goes on.
	t.Run("mismatch", func(t *testing.T) {
		if n < 2 {
			t.Skip("one rank cannot disagree with itself")
		}
		sub, err := c.Split(ctx, 0, me)
		if err != nil {
			t.Fatal(err)
		}
		m := 6
		if me == 0 {
			m = 5
		}
		err = sub.AllReduce(ctx, comm.F32(make([]float32, m)), comm.Sum).Wait()
		var ce *comm.Error
		if !errors.As(err, &ce) || !errors.Is(err, comm.ErrMismatch) || !slices.Equal(ce.Peers, []int{0, 1}) || ce.Seq != 1 {
			t.Fatalf("mismatch gave %v", err)
		}
		if !strings.Contains(err.Error(), "all_reduce(fp32[5], sum)") {
			t.Errorf("error does not name rank 0's call: %v", err)
		}
		if err := sub.Barrier(ctx).Wait(); !errors.Is(err, comm.ErrMismatch) {
			t.Errorf("next collective on the broken communicator: %v", err)
		}
		if err := c.Barrier(ctx).Wait(); err != nil {
			t.Errorf("world after the mismatch: %v", err)
		}
	})
}

// checkInproc runs all-reduce, reduce-scatter and all-gather of every dtype
// and op on c and on an in-process world of c.Size() ranks with the same
// inputs, and compares c's result with its rank's in-process one, bit for
// bit.
func checkInproc(t *testing.T, c comm.Comm) {
	t.Helper()
	ctx := context.Background()
	n, me := c.Size(), c.Rank()
	const m = 2*1024 + 3
	var cases []commtest.Case
	for _, dt := range []device.DType{device.F32, device.F16, device.BF16} {
		for _, op := range []comm.Op{comm.Sum, comm.Avg, comm.PreAvg} {
			cases = append(cases,
				commtest.Case{Kind: comm.KindAllReduce, DType: dt, Len: m, Op: op},
				commtest.Case{Kind: comm.KindReduceScatter, DType: dt, Len: m, Op: op})
		}
		cases = append(cases, commtest.Case{Kind: comm.KindAllGather, DType: dt, Len: m})
	}
	for i := range cases {
		cases[i].Seed = uint64(1000 + i)
	}
	// one run computes one rank's result of one case on comm x.
	run := func(x comm.Comm, tc commtest.Case) (comm.Buffer, error) {
		r := x.Rank()
		switch tc.Kind {
		case comm.KindAllReduce:
			out := commtest.Encode(tc.DType, commtest.Values(tc, r, m))
			return out, x.AllReduce(ctx, out, tc.Op).Wait()
		case comm.KindReduceScatter:
			out := commtest.Encode(tc.DType, make([]float32, m))
			in := commtest.Encode(tc.DType, commtest.Values(tc, r, n*m))
			return out, x.ReduceScatter(ctx, out, in, tc.Op).Wait()
		default:
			out := commtest.Encode(tc.DType, make([]float32, n*m))
			in := commtest.Encode(tc.DType, commtest.Values(tc, r, m))
			return out, x.AllGather(ctx, out, in).Wait()
		}
	}
	for _, tc := range cases {
		got, err := run(c, tc)
		if err != nil {
			t.Fatalf("%v: %v", tc, err)
		}
		var want comm.Buffer
		err = inproc.New(n, inproc.Options{}).Run(func(x comm.Comm) error {
			out, err := run(x, tc)
			if x.Rank() == me {
				want = out
			}
			return err
		})
		if err != nil {
			t.Fatalf("%v in process: %v", tc, err)
		}
		if !slices.Equal(commtest.Bits(got), commtest.Bits(want)) {
			t.Errorf("%v on rank %d of %d: MPI and in-process bits differ", tc, me, n)
		}
	}
}

//go:noinline
func nilPointer() *int { return nil }
