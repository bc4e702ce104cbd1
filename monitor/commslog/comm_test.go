package commslog

import (
	"context"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/google/go-cmp/cmp"
)

// TestWrapLogsEachCollective runs collectives on 2 in-process ranks
// through Wrap with a clock that advances 1 ms per reading, and checks
// what rank 0's logger holds: DeepSpeed's op names, message sizes (the
// local shard of an all-gather, the whole input of a reduce-scatter) and
// one count per call; prof_ops leaves the other ops out.
func TestWrapLogsEachCollective(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []string
		want []Row
	}{
		{"every op", nil, []Row{
			{Name: AllReduce, MsgBytes: 16, Count: 2},
			{Name: ReduceScatterTensor, MsgBytes: 32, Count: 1},
			{Name: AllGatherIntoTensor, MsgBytes: 8, Count: 1},
			{Name: Broadcast, MsgBytes: 16, Count: 1},
			{Name: Barrier, MsgBytes: 0, Count: 1},
		}},
		{"prof_ops", []string{AllGatherIntoTensor}, []Row{{Name: AllGatherIntoTensor, MsgBytes: 8, Count: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Row
			err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
				l, err := New(Options{WorldSize: 2})
				if err != nil {
					return err
				}
				var ms int64
				clock := func() time.Time { ms++; return time.Unix(0, ms*int64(time.Millisecond)) }
				w := Wrap(c, l, tc.ops, clock)
				ctx := context.Background()
				buf, in, out := make([]float32, 4), make([]float32, 8), make([]float32, 4)
				for _, h := range []func() comm.Handle{
					func() comm.Handle { return w.AllReduce(ctx, comm.F32(buf), comm.Sum) },
					func() comm.Handle { return w.AllReduce(ctx, comm.F32(buf), comm.Sum) },
					func() comm.Handle { return w.ReduceScatter(ctx, comm.F32(out), comm.F32(in), comm.Sum) },
					func() comm.Handle { return w.AllGather(ctx, comm.F32(out), comm.F32(in[:2])) },
					func() comm.Handle { return w.Broadcast(ctx, comm.F32(buf), 0) },
					func() comm.Handle { return w.Barrier(ctx) },
				} {
					hd := h()
					if err := hd.Wait(); err != nil {
						return err
					}
					if err := hd.Wait(); err != nil { // a second Wait logs nothing more
						return err
					}
				}
				if c.Rank() == 0 {
					got = l.Summary()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i].TotalLatencyMS <= 0 {
					t.Errorf("%s: latency %v, want the clock's advance", got[i].Name, got[i].TotalLatencyMS)
				}
				got[i].TotalLatencyMS, got[i].AvgLatencyMS, got[i].AlgbwGbps, got[i].BusbwGbps = 0, 0, 0, 0
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("summary (-want +got):\n%s", d)
			}
		})
	}
}
