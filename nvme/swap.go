package nvme

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/mem"
)

// Handle is one swap in flight. Wait blocks until it completes and returns
// its error; it may be called more than once and from any goroutine. The
// buffers and slices the swap was given belong to it until then.
type Handle struct {
	done chan struct{}
	err  error
	buf  *Buffer
}

func newHandle(b *Buffer) *Handle { return &Handle{done: make(chan struct{}), buf: b} }

func (h *Handle) complete(err error) {
	h.err = err
	close(h.done)
}

// failed is a handle that completed with err before it started.
func failed(b *Buffer, err error) *Handle {
	h := newHandle(b)
	h.complete(err)
	return h
}

// Wait blocks until the swap completes and returns its error.
func (h *Handle) Wait() error {
	<-h.done
	return h.err
}

// Done reports, without blocking, whether the swap has completed: Wait
// would return at once. A prefetcher uses it to count the reads that
// landed before they were needed.
func (h *Handle) Done() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Buffer is the buffer a Read or Prefetch fills: the caller's to use once
// Wait returns, and to Release, whether or not the read succeeded. It is
// nil for the other swaps.
func (h *Handle) Buffer() *Buffer { return h.buf }

// WaitAll waits for every handle, in order, and returns their errors joined.
func WaitAll(hs ...*Handle) error {
	var errs []error
	for _, h := range hs {
		if err := h.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Acquire takes a buffer from the pool, with nbytes in use. It waits while
// every buffer is in flight or in a SwapOut or SwapIn; when every buffer
// is held by callers it fails with ErrNoBuffer at once, since nothing
// would bring one back (a prefetcher can use that as "no room to read
// ahead"). nbytes larger than a buffer is an error naming the size knob.
func (s *Swapper) Acquire(nbytes int) (*Buffer, error) { return s.acquire(nbytes, true) }

func (s *Swapper) acquire(nbytes int, caller bool) (*Buffer, error) {
	if nbytes < 0 {
		panic("nvme: Acquire of a negative size")
	}
	if int64(nbytes) > s.bufBytes {
		return nil, s.tooBig(nbytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.free) == 0 && !s.closed {
		if s.callerHeld == len(s.bufs) {
			return nil, fmt.Errorf("%w: all %d are; Release one, or raise %s", ErrNoBuffer, len(s.bufs), s.opts.key("buffer_count"))
		}
		s.cond.Wait()
	}
	if s.closed {
		return nil, ErrClosed
	}
	b := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	b.to(bufHeld)
	b.caller = caller
	if caller {
		s.callerHeld++
	}
	b.n = nbytes
	return b, nil
}

func (s *Swapper) tooBig(nbytes int) error {
	fix := "size the buffers to the largest tensor swapped (Options.BufferBytes)"
	if strings.HasSuffix(s.opts.Source, "offload_param") {
		fix = "raise " + s.opts.key("buffer_size")
	}
	return fmt.Errorf("nvme: %d bytes do not fit a %s swap buffer (%d bytes); %s", nbytes, mem.FormatBytes(s.bufBytes), s.bufBytes, fix)
}

// Release returns a held buffer to the pool.
func (s *Swapper) Release(b *Buffer) {
	s.mu.Lock()
	s.toLocked(b, bufFree)
	s.putLocked(b)
	s.mu.Unlock()
	s.cond.Broadcast()
}

// toLocked moves a buffer the caller handed in to next. An illegal move
// unlocks s.mu before it panics, so that a recovered panic leaves the
// swapper usable.
func (s *Swapper) toLocked(b *Buffer, next bufState) {
	if !b.can(next) {
		s.mu.Unlock()
		panic(b.illegal(next))
	}
	b.state = next
}

// putLocked puts a buffer that has become free back in the pool.
func (s *Swapper) putLocked(b *Buffer) {
	if b.caller {
		s.callerHeld--
		b.caller = false
	}
	b.n = 0
	s.free = append(s.free, b)
}

// key returns key's state, making it.
func (s *Swapper) keyLocked(key string) *keyState {
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{path: filepath.Join(s.dir, key+swapSuffix)}
		s.keys[key] = ks
	}
	return ks
}

// submitLocked counts r as pending, unlocks s.mu and starts r, unless it
// has to wait for the requests before it on its key.
func (s *Swapper) submitLocked(ks *keyState, r *request) {
	s.pending.Add(1)
	if ks.busy {
		ks.waiting = append(ks.waiting, r)
		s.mu.Unlock()
		return
	}
	ks.busy = true
	s.mu.Unlock()
	s.start(ks, r)
}

// finishLocked ends a request on ks whose outcome is err: it unlocks s.mu,
// wakes the buffer waiters, completes h and starts the request waiting on
// ks after it.
func (s *Swapper) finishLocked(ks *keyState, h *Handle, err error) {
	var next *request
	if len(ks.waiting) == 0 {
		ks.busy = false
	} else {
		next = ks.waiting[0]
		ks.waiting[0] = nil
		ks.waiting = ks.waiting[1:]
	}
	s.mu.Unlock()
	s.cond.Broadcast()
	h.complete(err)
	s.start(ks, next)
	s.pending.Done()
}

// start opens r's file and hands r to the engine. A read of a key whose
// last write failed fails without touching the file. A write sums its
// blocks into the key's checksums, a read checks against them: the
// requests before r on the key are complete, so they are r's to use.
func (s *Swapper) start(ks *keyState, r *request) {
	if r == nil {
		return
	}
	s.mu.Lock()
	werr := ks.err
	if !s.opts.noChecksum {
		if r.write {
			n := blocks(len(r.data), int(s.opts.BlockSize))
			if cap(ks.sums) < n {
				ks.sums = make([]uint32, n)
			}
			ks.sums = ks.sums[:n]
		}
		r.sums = ks.sums // a read has its write's length: the same blocks
	}
	s.mu.Unlock()
	if !r.write {
		if werr != nil {
			cause := fmt.Errorf("its last write failed, so the file holds nothing to trust: %w", werr)
			if ioe, ok := werr.(*IOError); ok {
				cause = fmt.Errorf("its last write failed at offset %d, so the file holds nothing to trust: %w", ioe.Offset, bare(ioe.Err))
			}
			r.done(&IOError{Op: "read", Key: r.key, Path: r.path, Err: cause})
			return
		}
	}
	f, err := s.fs.OpenFile(r.path, r.write)
	if err != nil {
		r.done(&IOError{Op: "open", Key: r.key, Path: r.path, Err: err})
		return
	}
	r.file = f
	s.eng.run(r)
}

// Write writes the bytes in use of b to key's file, asynchronously, and
// takes b: it goes back to the pool when the write completes, and the
// caller must not touch it after the call. A failed write leaves the key
// unreadable until a later write succeeds.
func (s *Swapper) Write(key string, b *Buffer) *Handle {
	checkKey(key)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return failed(nil, ErrClosed)
	}
	s.toLocked(b, bufInFlight)
	if b.caller {
		s.callerHeld--
		b.caller = false
	}
	ks := s.keyLocked(key)
	data := b.padded()
	clear(data[b.n:]) // the padding goes to disk: keep it deterministic
	if grow := int64(len(data)) - ks.onDisk; grow > 0 {
		if err := s.acct.Reserve(s.opts.Category, mem.NVMe, grow); err != nil {
			b.to(bufFree)
			s.putLocked(b)
			s.mu.Unlock()
			s.cond.Broadcast()
			return failed(nil, fmt.Errorf("nvme: write of key %q: %w", key, err))
		}
		ks.onDisk += grow
		s.nvmeBytes += grow
	}
	ks.size, ks.written = int64(b.n), true
	h := newHandle(nil)
	r := &request{write: true, key: key, path: ks.path, data: data}
	r.done = func(err error) {
		s.mu.Lock()
		ks.err = err
		b.to(bufFree)
		s.putLocked(b)
		if err == nil {
			s.stats.Writes++
			s.stats.BytesWritten += int64(len(data))
		}
		s.finishLocked(ks, h, err)
	}
	s.submitLocked(ks, r)
	return h
}

// Read reads key's file into b, which the caller holds, asynchronously:
// b's length becomes the bytes last written to key, and b is the caller's
// again once Wait returns (Handle.Buffer is b).
func (s *Swapper) Read(key string, b *Buffer) *Handle { return s.read(key, b, nil) }

// Prefetch takes a buffer and starts reading key into it: the "read the
// next sub-group while this one steps" half of double buffering. Wait on
// the handle, use Handle.Buffer, then Release it. It fails at once, with
// ErrNoBuffer, when every buffer is held by the caller.
func (s *Swapper) Prefetch(key string) (*Handle, error) {
	b, err := s.Acquire(0)
	if err != nil {
		return nil, fmt.Errorf("nvme: prefetch of key %q: %w", key, err)
	}
	return s.Read(key, b), nil
}

// SwapOut copies src into a pool buffer and writes it to key's file,
// asynchronously: src is free again when SwapOut returns. It waits for a
// buffer as Acquire does.
func (s *Swapper) SwapOut(key string, src []float32) *Handle {
	checkKey(key)
	b, err := s.acquire(4*len(src), false)
	if err != nil {
		return failed(nil, fmt.Errorf("nvme: swap out of key %q: %w", key, err))
	}
	copy(b.data, f32Bytes(src))
	return s.Write(key, b)
}

// SwapIn reads key's file into dst through a pool buffer, asynchronously:
// dst belongs to the swap until Wait returns. dst must have exactly the
// length last written to key.
func (s *Swapper) SwapIn(key string, dst []float32) *Handle {
	checkKey(key)
	b, err := s.acquire(0, false)
	if err != nil {
		return failed(nil, fmt.Errorf("nvme: swap in of key %q: %w", key, err))
	}
	if dst == nil {
		dst = []float32{}
	}
	return s.read(key, b, dst)
}

// read reads key into b. With dst nil it is Read; otherwise b is the
// swapper's own and the completed read is copied into dst and b freed.
func (s *Swapper) read(key string, b *Buffer, dst []float32) *Handle {
	checkKey(key)
	bounce := dst != nil
	caller := b
	if bounce {
		caller = nil
	}
	s.mu.Lock()
	ks := s.keys[key]
	var err error
	switch {
	case s.closed:
		err = ErrClosed
	case ks == nil || !ks.written:
		err = fmt.Errorf("%w: %q", ErrUnknownKey, key)
	case ks.size > s.bufBytes:
		err = fmt.Errorf("nvme: read of key %q: %w", key, s.tooBig(int(ks.size)))
	case bounce && ks.size != 4*int64(len(dst)):
		err = fmt.Errorf("nvme: swap in of key %q: it holds %d bytes, the destination %d", key, ks.size, 4*len(dst))
	}
	if err != nil {
		if bounce {
			b.to(bufFree)
			s.putLocked(b)
		}
		s.mu.Unlock()
		s.cond.Broadcast()
		return failed(caller, err)
	}
	s.toLocked(b, bufInFlight)
	b.n = int(ks.size)
	data := b.padded()
	h := newHandle(caller)
	r := &request{key: key, path: ks.path, data: data}
	r.done = func(err error) {
		if err == nil && bounce {
			copy(f32Bytes(dst), data[:b.n])
		}
		s.mu.Lock()
		if bounce {
			b.to(bufFree)
			s.putLocked(b)
		} else {
			b.to(bufHeld)
		}
		if err == nil {
			s.stats.Reads++
			s.stats.BytesRead += int64(len(data))
		}
		s.finishLocked(ks, h, err)
	}
	s.submitLocked(ks, r)
	return h
}
