package rendezvous

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
)

// The multi-process tests start the test binary itself as the ranks of a
// job: TestMain sees DSZERO_RDV_CHILD and runs one rank's rendezvous
// (childMain) from the launcher variables the test set, instead of the
// tests, and prints what it got as JSON.

const childVar = "DSZERO_RDV_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childVar) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childResult is what one rank process reports.
type childResult struct {
	Rank    int      `json:"rank"`
	Blob    []byte   `json:"blob"`
	Members []Member `json:"members"`
	Err     string   `json:"err"`
	Kind    string   `json:"kind"` // which sentinel the error matches
}

func childMain() int {
	env, err := comm.ParseEnv(comm.EnvMap(os.Environ()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	timeout, _ := time.ParseDuration(os.Getenv("DSZERO_RDV_TIMEOUT"))
	s, err := Rendezvous(context.Background(), env, Options{Timeout: timeout, Blob: func() ([]byte, error) {
		b := make([]byte, 128)
		rand.Read(b)
		return b, nil
	}})
	res := childResult{Rank: env.Rank}
	if err != nil {
		res.Err = err.Error()
		for name, k := range map[string]error{"no-master": ErrNoMaster, "world-size": ErrWorldSize, "duplicate": ErrDuplicate, "missing": ErrMissing} {
			if errors.Is(err, k) {
				res.Kind = name
			}
		}
	} else {
		res.Blob, res.Members = s.Blob, s.Members
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			res.Err = "close: " + err.Error()
		}
	}
	json.NewEncoder(os.Stdout).Encode(res)
	if res.Err != "" {
		return 3
	}
	return 0
}

// rankSpec is one rank process: its RANK and WORLD_SIZE.
type rankSpec struct{ rank, world int }

// runRanks starts one process per spec, in order, against the store at
// 127.0.0.1:port, and returns their reports in the same order.
func runRanks(t *testing.T, port int, timeout time.Duration, specs ...rankSpec) []childResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]childResult, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childVar+"=1",
			"RANK="+strconv.Itoa(sp.rank), "WORLD_SIZE="+strconv.Itoa(sp.world),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"DSZERO_RDV_TIMEOUT="+timeout.String())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			cmd.Wait()
			if err := json.Unmarshal(stdout.Bytes(), &out[i]); err != nil {
				t.Errorf("rank %d printed %q (stderr %q): %v", sp.rank, stdout.String(), stderr.String(), err)
			}
		})
	}
	wg.Wait()
	return out
}

func TestRendezvousExchangesTheID(t *testing.T) {
	port := freePort(t)
	// Rank 0 last: the others retry until it serves the store.
	res := runRanks(t, port, time.Minute, rankSpec{3, 4}, rankSpec{2, 4}, rankSpec{1, 4}, rankSpec{0, 4})
	var id []byte
	for _, r := range res {
		if r.Err != "" {
			t.Fatalf("rank %d: %s", r.Rank, r.Err)
		}
		if r.Rank == 0 {
			id = r.Blob
		}
	}
	if len(id) != 128 || bytes.Equal(id, make([]byte, 128)) {
		t.Fatalf("rank 0's id is %x, want 128 random bytes", id)
	}
	pids := map[int]bool{}
	for _, r := range res {
		if !bytes.Equal(r.Blob, id) {
			t.Errorf("rank %d got id %x, rank 0 made %x", r.Rank, r.Blob, id)
		}
		if len(r.Members) != 4 {
			t.Fatalf("rank %d sees %d members, want 4", r.Rank, len(r.Members))
		}
		for i, m := range r.Members {
			if m.Rank != i || m.WorldSize != 4 || m.PID == 0 {
				t.Errorf("rank %d: member %d is %+v", r.Rank, i, m)
			}
			pids[m.PID] = true
		}
	}
	if len(pids) != 4 {
		t.Errorf("members have %d distinct pids, want 4 (one process per rank)", len(pids))
	}
}

// wantAll checks that every rank failed with kind and a message holding
// every one of parts.
func wantAll(t *testing.T, res []childResult, kind string, parts ...string) {
	t.Helper()
	for _, r := range res {
		if r.Err == "" {
			t.Errorf("rank %d succeeded, want a %s error", r.Rank, kind)
			continue
		}
		if r.Kind != kind {
			t.Errorf("rank %d failed with kind %q, want %q: %s", r.Rank, r.Kind, kind, r.Err)
		}
		if !containsAll(r.Err, parts...) {
			t.Errorf("rank %d: %s\nwant it to contain %q", r.Rank, r.Err, parts)
		}
	}
}

func TestRendezvousRejectsAWrongWorldSize(t *testing.T) {
	res := runRanks(t, freePort(t), time.Minute, rankSpec{0, 3}, rankSpec{1, 3}, rankSpec{2, 4})
	wantAll(t, res, "world-size", "rank 2", "WORLD_SIZE=4", "rank 0 has WORLD_SIZE=3")
}

func TestRendezvousRejectsADuplicateRank(t *testing.T) {
	res := runRanks(t, freePort(t), time.Minute, rankSpec{0, 3}, rankSpec{1, 3}, rankSpec{1, 3})
	wantAll(t, res, "duplicate", "rank 1 registered twice", "RANK=1")
}

func TestRendezvousWithoutRankZero(t *testing.T) {
	port := freePort(t)
	res := runRanks(t, port, time.Second, rankSpec{1, 2})
	wantAll(t, res, "no-master", fmt.Sprintf("127.0.0.1:%d", port), "MASTER_ADDR:MASTER_PORT", "rank 0")
}

func TestRendezvousNamesTheRanksThatNeverArrive(t *testing.T) {
	res := runRanks(t, freePort(t), 2*time.Second, rankSpec{0, 3}, rankSpec{1, 3})
	wantAll(t, res, "missing", "rank 2 of 3 never arrived")
	res = runRanks(t, freePort(t), 2*time.Second, rankSpec{0, 4}, rankSpec{2, 4})
	wantAll(t, res, "missing", "ranks 1, 3 of 4 never arrived")
}

func TestRendezvousOfOneRankNeedsNoStore(t *testing.T) {
	s, err := Rendezvous(context.Background(), comm.Env{Rank: 0, WorldSize: 1}, Options{Blob: func() ([]byte, error) { return []byte("id"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Blob) != "id" || s.Store != nil || len(s.Members) != 1 {
		t.Fatalf("session %+v", s)
	}
	_, err = Rendezvous(context.Background(), comm.Env{Rank: 1, WorldSize: 2}, Options{})
	if !errors.Is(err, ErrEnv) || !containsAll(err.Error(), "MASTER_ADDR", "MASTER_PORT") {
		t.Fatalf("two ranks without MASTER_ADDR: %v", err)
	}
}

func TestBroadcastBlob(t *testing.T) {
	id := make([]byte, 127) // odd: the last word is half used
	rand.Read(id)
	err := inproc.New(3, inproc.Options{}).Run(func(c comm.Comm) error {
		var mine []byte
		if c.Rank() == 0 {
			mine = id
		}
		got, err := BroadcastBlob(context.Background(), c, mine, len(id))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, id) {
			return fmt.Errorf("got %x, want %x", got, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
