//go:build mpi

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTrainMPIFailures runs dszero train under mpirun where the job's
// environment or one of its ranks goes wrong:
//
//   - stopped-rank: rank 1 is stopped (kill -STOP) mid-run; rank 0 exits
//     within --comm-timeout (3s here) with an error naming the step, the
//     collective and rank 1, and the job ends (mpirun's exit status 124,
//     MPI_Abort's) instead of rank 0 waiting forever.
//   - master-addr: MASTER_ADDR without MASTER_PORT, as many clusters'
//     environments export it, is a warning (printed once) and the job
//     trains; Open MPI's variables name the job.
func TestTrainMPIFailures(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dszero")
	if out, err := exec.Command("go", "build", "-tags", "mpi", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags mpi: %v\n%s", err, out)
	}
	args := func(extra ...string) []string {
		return append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", bin, "train",
			"--model", "tiny", "--data", "random", "--seq", "16", "--quiet", "--blas", "gonum"}, extra...)
	}

	t.Run("master-addr", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun, args("--steps", "2")...)
		cmd.Env = append(os.Environ(), "MASTER_ADDR=node17")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("MASTER_ADDR without MASTER_PORT: %v\n%s", err, out)
		}
		const warning = "dszero train: warning: MASTER_ADDR is set but MASTER_PORT is not: ignored, since mpirun's OMPI_COMM_WORLD_* variables name the job"
		if n := strings.Count(string(out), warning); n != 1 || !strings.Contains(string(out), "done: 2 steps") {
			t.Errorf("want one warning (%d) and a finished run:\n%s", n, out)
		}
	})

	t.Run("stopped-rank", func(t *testing.T) {
		log := filepath.Join(dir, "stopped.jsonl")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun, args("--steps", "1000000", "--comm-timeout", "3s", "--json-log", log)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// Training runs once rank 0 has logged a few steps; then stop rank 1.
		var victim int
		for deadline := time.Now().Add(90 * time.Second); victim == 0; time.Sleep(50 * time.Millisecond) {
			raw, _ := os.ReadFile(log)
			if bytes.Count(raw, []byte("\n")) >= 3 {
				victim = rankPid(cmd.Process.Pid, 1)
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank 1 not found training within 90s:\n%s", out.String())
			}
		}
		if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stoppedAt := time.Now()
		defer syscall.Kill(victim, syscall.SIGKILL) // whatever happens
		var werr error
		select {
		case werr = <-exited:
		case <-time.After(2 * time.Minute): // generous: the job ends ~5s after the stop
			syscall.Kill(victim, syscall.SIGCONT)
			cancel()
			<-exited
			t.Fatalf("the job still ran 2 minutes after rank 1 stopped:\n%s", out.String())
		}
		t.Logf("the job ended %v after rank 1 stopped", time.Since(stoppedAt).Round(time.Millisecond))
		var exit *exec.ExitError
		if !errors.As(werr, &exit) || exit.ExitCode() != 124 {
			t.Errorf("mpirun: %v, want exit status 124 (MPI_Abort)", werr)
		}
		got := out.String()
		for _, want := range []string{"dszero train: rank 0: step ", "on world (rank 0 of 2): timed out after 3s: rank 1 did not arrive (stopped or hung: no answer within 1s)"} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", got)
		}
	})
}

// rankPid is the pid of the child of mpirun (pid parent) that is rank
// rank, read from /proc; 0 when there is none yet.
func rankPid(parent, rank int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append([]byte{0}, env...), []byte("\x00OMPI_COMM_WORLD_RANK="+strconv.Itoa(rank)+"\x00")) {
			return pid
		}
	}
	return 0
}
