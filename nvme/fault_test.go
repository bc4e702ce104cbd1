package nvme

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// faultSwapper is a swapper on a MemFS behind the given faults.
func faultSwapper(t *testing.T, faults ...Fault) (*Swapper, *FaultFS) {
	t.Helper()
	m := NewMemFS(0)
	if err := m.Mkdir("/nvme"); err != nil {
		t.Fatal(err)
	}
	ffs := NewFaultFS(m, faults...)
	s, _ := newSwapper(t, ffs, testOptions("/nvme"))
	return s, ffs
}

// TestIOFaults: every injected fault comes back as an *IOError naming the
// operation, key, file and offset, with the cause and the fix.
func TestIOFaults(t *testing.T) {
	const n = 5000 // 20000 bytes: blocks of 8192 at 0, 8192, 16384
	path := "/nvme/dszero_rank0/optimizer/sg1.exp_avg.swp"
	for _, tc := range []struct {
		name   string
		fault  Fault
		op     string
		offset int64
		cause  error
		fix    string
	}{
		{"EIO on write", Fault{Ops: OpWrite, Path: "sg1", Err: syscall.EIO}, "write", 0, syscall.EIO, "I/O error"},
		{"ENOSPC mid-file", Fault{Ops: OpWrite, Path: "sg1", From: 10000, Err: syscall.ENOSPC}, "write", 8192, syscall.ENOSPC, "full"},
		{"short write", Fault{Ops: OpWrite, Path: "sg1", From: 17000, Short: true}, "write", 16384, ErrShortWrite, "full"},
		{"EIO on read", Fault{Ops: OpRead, Path: "sg1", From: 16385, Err: syscall.EIO}, "read", 16384, syscall.EIO, "I/O error"},
		{"unwritable file", Fault{Ops: OpOpen, Path: "sg1", Err: syscall.EACCES}, "open", 0, syscall.EACCES, "writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := faultSwapper(t, tc.fault)
			src := make([]float32, n)
			werr := s.SwapOut("sg1.exp_avg", src).Wait()
			rerr := s.SwapIn("sg1.exp_avg", make([]float32, n)).Wait()
			err := werr
			if tc.op == "read" {
				if werr != nil {
					t.Fatalf("write: %v", werr)
				}
				err = rerr
			} else if rerr == nil {
				t.Error("a read after a failed write succeeded")
			}
			var ioe *IOError
			if !errors.As(err, &ioe) {
				t.Fatalf("error %v is not an *IOError", err)
			}
			if ioe.Op != tc.op || ioe.Key != "sg1.exp_avg" || ioe.Path != path || ioe.Offset != tc.offset {
				t.Errorf("got %s of %q at %s offset %d, want %s at offset %d", ioe.Op, ioe.Key, ioe.Path, ioe.Offset, tc.op, tc.offset)
			}
			if !errors.Is(err, tc.cause) {
				t.Errorf("error %v does not wrap %v", err, tc.cause)
			}
			msg := err.Error()
			for _, want := range []string{path, `"sg1.exp_avg"`, tc.fix} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			// Other keys are unaffected.
			if err := s.SwapOut("sg2", src).Wait(); err != nil {
				t.Errorf("another key: %v", err)
			}
		})
	}
}

// TestRewriteAfterFault: a key whose write failed is readable again once
// a write succeeds.
func TestRewriteAfterFault(t *testing.T) {
	s, _ := faultSwapper(t, Fault{Ops: OpWrite, Err: syscall.ENOSPC, Times: 1})
	src := []float32{1, 2, 3}
	if err := s.SwapOut("k", src).Wait(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("first write = %v", err)
	}
	if err := s.SwapIn("k", make([]float32, 3)).Wait(); err == nil || !strings.Contains(err.Error(), "last write failed") {
		t.Fatalf("read after the failed write = %v", err)
	}
	if err := s.SwapOut("k", src).Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := s.SwapIn("k", got).Wait(); err != nil || got[2] != 3 {
		t.Fatalf("read after the rewrite = %v, %v", got, err)
	}
}

// TestShortRead: a swap file cut short behind the swapper's back.
func TestShortRead(t *testing.T) {
	s, ffs := faultSwapper(t)
	if err := s.SwapOut("k", make([]float32, 3000)).Wait(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.Dir(), "k.swp")
	if err := ffs.Remove(path); err != nil {
		t.Fatal(err)
	}
	f, _ := ffs.OpenFile(path, true)
	f.WriteAt(make([]byte, 5000), 0)
	f.Close()
	err := s.SwapIn("k", make([]float32, 3000)).Wait()
	var ioe *IOError
	if !errors.Is(err, ErrShortRead) || !errors.As(err, &ioe) || ioe.Offset != 0 || !strings.Contains(err.Error(), "must not be touched") {
		t.Errorf("read of a cut file = %v", err)
	}
}

// TestSlowIO: slow I/O makes swaps slow, not synchronous: SwapOut returns
// before the write lands, and Close waits for it.
func TestSlowIO(t *testing.T) {
	const delay = 100 * time.Millisecond
	s, _ := faultSwapper(t, Fault{Ops: OpWrite | OpRead, Delay: delay})
	start := time.Now()
	h := s.SwapOut("k", make([]float32, 1000))
	if issued := time.Since(start); issued >= delay {
		t.Errorf("SwapOut took %v: it waited for the write", issued)
	}
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("the write completed after %v, before its %v delay", took, delay)
	}
	s.SwapOut("k2", make([]float32, 1000))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Writes != 2 {
		t.Errorf("Close returned with %d of 2 writes done", st.Writes)
	}
}

// TestQueueDepth: the blocks of a request are in flight together, up to
// intra_op_parallelism × queue_depth of them.
func TestQueueDepth(t *testing.T) {
	const delay = 40 * time.Millisecond
	for _, tc := range []struct{ parallel, depth int }{{1, 1}, {2, 4}} {
		m := NewMemFS(0)
		m.Mkdir("/nvme")
		o := testOptions("/nvme")
		o.IntraOpParallelism, o.QueueDepth = tc.parallel, tc.depth
		s, _ := newSwapper(t, NewFaultFS(m, Fault{Ops: OpWrite, Delay: delay}), o)
		start := time.Now()
		if err := s.SwapOut("k", make([]float32, 8*o.BlockSize/4)).Wait(); err != nil { // 8 blocks
			t.Fatal(err)
		}
		took := time.Since(start)
		workers := tc.parallel * tc.depth
		if min := time.Duration(8/workers) * delay; took < min {
			t.Errorf("%d workers wrote 8 slow blocks in %v, under %v", workers, took, min)
		}
		if workers == 8 && took > 4*delay {
			t.Errorf("8 workers wrote 8 slow blocks in %v: they did not overlap", took)
		}
	}
}

// TestHandleDone: Done tells a read still in flight (a slow disk) from
// one that has landed, without blocking, and BufferCount is the pool a
// prefetcher must leave one buffer of.
func TestHandleDone(t *testing.T) {
	s, _ := faultSwapper(t, Fault{Ops: OpRead, Path: "slow", Delay: 50 * time.Millisecond})
	if got := s.BufferCount(); got != 4 {
		t.Errorf("BufferCount = %d, want buffer_count 4", got)
	}
	for _, key := range []string{"slow", "fast"} {
		if err := s.SwapOut(key, []float32{1, 2, 3}).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	slow, err := s.Prefetch("slow")
	if err != nil {
		t.Fatal(err)
	}
	if slow.Done() {
		t.Errorf("a read delayed 50ms is done at once")
	}
	fast, err := s.Prefetch("fast")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Handle{slow, fast} {
		if err := h.Wait(); err != nil {
			t.Fatal(err)
		}
		if !h.Done() {
			t.Errorf("Done is false after Wait returned")
		}
		if got := h.Buffer().F32(); len(got) != 3 || got[2] != 3 {
			t.Errorf("read %v, want [1 2 3]", got)
		}
		s.Release(h.Buffer())
	}
}
