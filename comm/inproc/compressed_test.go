package inproc

import (
	"context"
	"fmt"
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
