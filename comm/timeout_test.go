package comm_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/comm"
)

func TestTimedOut(t *testing.T) {
	for _, tc := range []struct {
		name       string
		group      string
		members    []int
		stragglers []comm.Straggler
		finishing  bool
		want       string
	}{
		{name: "one rank, no state", group: "world", members: []int{0, 1}, stragglers: []comm.Straggler{{Rank: 1}},
			want: "timed out after 3s: rank 1 did not arrive"},
		{name: "one rank with its state", group: "world", members: []int{0, 1}, stragglers: []comm.Straggler{{Rank: 1, State: "stopped or hung"}},
			want: "timed out after 3s: rank 1 did not arrive (stopped or hung)"},
		{name: "sub-group ranks, states each", group: "group[2 3 5]", members: []int{2, 3, 5},
			stragglers: []comm.Straggler{{Rank: 1, State: "busy"}, {Rank: 2, State: "stopped"}},
			want:       "timed out after 3s: ranks 1 (world rank 3), 2 (world rank 5) did not arrive (rank 1 (world rank 3): busy; rank 2 (world rank 5): stopped)"},
		{name: "did not finish", group: "world", members: []int{0, 1, 2}, stragglers: []comm.Straggler{{Rank: 0}, {Rank: 2}}, finishing: true,
			want: "timed out after 3s: ranks 0, 2 did not finish"},
		{name: "everyone arrived", group: "world", members: []int{0, 1},
			want: "timed out after 3s: every rank arrived, but the collective did not complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := comm.TimedOut(3*time.Second, tc.group, tc.members, tc.stragglers, tc.finishing, nil)
			if d := cmp.Diff(tc.want, f.Error()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if !errors.Is(f, comm.ErrTimeout) {
				t.Errorf("%v is not ErrTimeout", f)
			}
		})
	}
}

func TestCheckTimeout(t *testing.T) {
	if d, err := comm.CheckTimeout("--comm-timeout", 0); d != 30*time.Minute || err != nil {
		t.Errorf("zero: %v, %v; want DeepSpeed's 30m", d, err)
	}
	if d, err := comm.CheckTimeout("--comm-timeout", 5*time.Second); d != 5*time.Second || err != nil {
		t.Errorf("5s: %v, %v", d, err)
	}
	if _, err := comm.CheckTimeout("--comm-timeout", -time.Second); err == nil || !strings.Contains(err.Error(), "--comm-timeout -1s: a timeout must be positive") {
		t.Errorf("negative: %v", err)
	}
}

// TestWaitAllOneErrorPerCause: the collectives queued behind a failure
// share its cause; WaitAll reports it once, beside other causes.
func TestWaitAllOneErrorPerCause(t *testing.T) {
	broken := &comm.FaultError{Msg: "rank 1 failed", Kind: comm.ErrRankFailed}
	other := &comm.FaultError{Msg: "rank 2 failed", Kind: comm.ErrRankFailed}
	fail := func(seq uint64, f error) comm.Handle {
		return comm.Done(&comm.Error{Group: "world", Kind: comm.KindAllGather, Seq: seq, Size: 3, Err: f})
	}
	err := comm.WaitAll(fail(4, broken), comm.Done(nil), fail(5, broken), fail(6, broken), fail(2, other), comm.Done(errors.New("plain")))
	want := "comm: all_gather #4 on world (rank 0 of 3): rank 1 failed\ncomm: all_gather #2 on world (rank 0 of 3): rank 2 failed\nplain"
	if err == nil || err.Error() != want {
		t.Errorf("WaitAll = %v, want\n%s", err, want)
	}
}
