package inproc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
)

// TestAllToAll runs commtest's all_to_all check on worlds of 1 to 5 ranks.
func TestAllToAll(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			err := New(n, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
				return commtest.CheckAllToAll(context.Background(), c.(comm.AllToAller))
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCompressedAllReduce runs the compressed all-reduce against
// commtest's float64 model on 1 to 5 ranks, over several calls with error
// feedback and ragged chunks, through all_to_all and through the
// all_gather fallback of a Comm that has no all_to_all.
func TestCompressedAllReduce(t *testing.T) {
	for n := 1; n <= 5; n++ {
		for _, fallback := range []bool{false, true} {
			t.Run(fmt.Sprintf("ranks=%d/fallback=%v", n, fallback), func(t *testing.T) {
				err := New(n, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
					if fallback {
						c = plainComm{c}
					}
					return commtest.CheckCompressed(context.Background(), c)
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// plainComm hides the backend's AllToAll.
type plainComm struct{ comm.Comm }

// TestCompressedTraffic: after the exchange each rank has sent the
// nominal bytes of one all_to_all and one all_gather of the packed slots,
// ≈ 1/32 of an fp32 all-reduce of the same buffer.
func TestCompressedTraffic(t *testing.T) {
	const n, N = 4, 1 << 16
	err := New(n, Options{}).Run(func(c comm.Comm) error {
		x := make([]float32, N)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		ef := comm.NewErrorFeedback(N, n, c.Rank())
		before := c.Traffic()
		if err := comm.NewCompressor(c).AllReduce(context.Background(), x, &ef); err != nil {
			return err
		}
		after := c.Traffic()
		w := int64(comm.CompressedWords(N, n))
		a2a := after.Of(comm.KindAllToAll).Sent - before.Of(comm.KindAllToAll).Sent
		ag := after.Of(comm.KindAllGather).Sent - before.Of(comm.KindAllGather).Sent
		if want := int64(n-1) * n * w * 2 / n; a2a != want {
			return fmt.Errorf("rank %d: all_to_all sent %d bytes, want %d", c.Rank(), a2a, want)
		}
		if want := int64(n-1) * n * w * 2 / n; ag != want {
			return fmt.Errorf("rank %d: all_gather sent %d bytes, want %d", c.Rank(), ag, want)
		}
		plain, _ := comm.NominalTraffic(comm.KindAllReduce, n, c.Rank(), 0, 4*N)
		if r := float64(a2a+ag) / float64(plain); r < 1.0/32 || r > 1.01/32 {
			return fmt.Errorf("rank %d: compressed/plain bytes %.5f, want ≈ 1/32 = %.5f", c.Rank(), r, 1.0/32)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCompressedAllReduceFailure: a rank that fails in the first phase's
// all_to_all, or one that never arrives at the second phase's all_gather,
// fails the compressed all-reduce on every rank with an error naming the
// phase, the collective and the rank at fault, within the timeout.
func TestCompressedAllReduceFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  comm.Kind
		fault Fault
		want  []string
	}{
		{"phase 1 rank failed", comm.KindAllToAll, Fault{Err: errors.New("boom")}, []string{"phase 1", "all_to_all", "rank 2"}},
		{"phase 2 rank absent", comm.KindAllGather, Fault{Delay: time.Hour}, []string{"phase 2", "all_gather", "rank 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inject := func(s Site) Fault {
				if s.WorldRank == 2 && s.Kind == tc.kind {
					return tc.fault
				}
				return Fault{}
			}
			var mu sync.Mutex
			errs := map[int]error{}
			start := time.Now()
			_ = New(3, Options{Timeout: 300 * time.Millisecond, Inject: inject}).Run(func(c comm.Comm) error {
				x := make([]float32, 100)
				ef := comm.NewErrorFeedback(len(x), c.Size(), c.Rank())
				err := comm.NewCompressor(c).AllReduce(context.Background(), x, &ef)
				mu.Lock()
				errs[c.Rank()] = err
				mu.Unlock()
				return err
			})
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("took %v", el)
			}
			for r := range 3 {
				err := errs[r]
				if err == nil {
					if tc.fault.Delay > 0 && r == 2 {
						continue // the absent rank itself may not have got there
					}
					t.Errorf("rank %d: no error", r)
					continue
				}
				for _, w := range tc.want {
					if r != 2 && !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: %v, want it to name %q", r, err, w)
					}
				}
			}
		})
	}
}
