package zcore

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// Solo is a communicator of one rank: every collective completes at once,
// as a copy or nothing (the reduction of one buffer is the buffer). A
// strategy built without a Comm runs on it, so the strategies have one code
// path for every world size. It passes package commtest's suite.
func Solo() comm.Comm { return &solo{} }

type solo struct {
	mu      sync.Mutex
	traffic comm.Traffic
}

var _ comm.Comm = (*solo)(nil)

func (s *solo) Rank() int { return 0 }
func (s *solo) Size() int { return 1 }

func (s *solo) done(ctx context.Context, k comm.Kind, bytes int64) comm.Handle {
	if err := ctx.Err(); err != nil {
		return comm.Done(&comm.Error{Group: "solo", Kind: k, Rank: 0, Size: 1, Peers: []int{0}, Err: fmt.Errorf("%w: %w", comm.ErrRankFailed, err)})
	}
	s.mu.Lock()
	s.traffic.Record(k, comm.Counts{Calls: 1, Bytes: bytes})
	s.mu.Unlock()
	return comm.Done(nil)
}

func (s *solo) AllReduce(ctx context.Context, buf comm.Buffer, op comm.Op) comm.Handle {
	if !op.Valid() {
		panic(fmt.Sprintf("zcore: solo all_reduce with invalid %v", op))
	}
	return s.done(ctx, comm.KindAllReduce, buf.Bytes())
}

func (s *solo) ReduceScatter(ctx context.Context, out, in comm.Buffer, op comm.Op) comm.Handle {
	if !op.Valid() {
		panic(fmt.Sprintf("zcore: solo reduce_scatter with invalid %v", op))
	}
	mustMatch("reduce_scatter", out, in)
	h := s.done(ctx, comm.KindReduceScatter, in.Bytes())
	if h.Wait() == nil {
		copyBuf(out, in)
	}
	return h
}

func (s *solo) AllGather(ctx context.Context, out, in comm.Buffer) comm.Handle {
	mustMatch("all_gather", in, out)
	h := s.done(ctx, comm.KindAllGather, out.Bytes())
	if h.Wait() == nil {
		copyBuf(out, in)
	}
	return h
}

func (s *solo) Broadcast(ctx context.Context, buf comm.Buffer, root int) comm.Handle {
	if root != 0 {
		panic(fmt.Sprintf("zcore: solo broadcast from root %d", root))
	}
	return s.done(ctx, comm.KindBroadcast, buf.Bytes())
}

func (s *solo) Barrier(ctx context.Context) comm.Handle { return s.done(ctx, comm.KindBarrier, 0) }

func (s *solo) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < 0 && color != comm.NoColor {
		panic(fmt.Sprintf("zcore: solo split with color %d", color))
	}
	if err := s.done(ctx, comm.KindSplit, 0).Wait(); err != nil {
		return nil, err
	}
	if color == comm.NoColor {
		return nil, nil
	}
	return &solo{}, nil
}

func (s *solo) Traffic() comm.Traffic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traffic
}

// mustMatch panics unless a and b have one dtype and one length (the
// chunk of a world of one is the whole).
func mustMatch(name string, a, b comm.Buffer) {
	if a.DType() != b.DType() || a.Len() != b.Len() {
		panic(fmt.Sprintf("zcore: solo %s of %v and %v: want one dtype and one length", name, a, b))
	}
}

// copyBuf copies src into dst unless they are the same memory.
func copyBuf(dst, src comm.Buffer) {
	if dst.Len() == 0 {
		return
	}
	if dst.DType() == device.F32 {
		d, s := dst.F32(), src.F32()
		if unsafe.SliceData(d) != unsafe.SliceData(s) {
			copy(d, s)
		}
		return
	}
	d, s := dst.Bits(), src.Bits()
	if unsafe.SliceData(d) != unsafe.SliceData(s) {
		copy(d, s)
	}
}
