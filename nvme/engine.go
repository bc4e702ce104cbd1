package nvme

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// request is one swap in the engine: data moved to or from one file, cut
// into blocks that the workers take in order.
type request struct {
	write bool
	key   string
	path  string
	file  File   // open before the request reaches the engine
	data  []byte // Align-padded, Align-aligned
	base  int64  // file offset of data[0]
	// sums is the CRC-32C of each block of data (see checksum.go): a
	// write fills it as its blocks go out, a read checks each block it
	// reads against it. nil: unchecked (the preflight).
	sums []uint32

	// Guarded by engine.mu.
	next int      // bytes of data handed to workers
	left int      // blocks handed out and not yet finished, plus 1 until all are handed out
	err  *IOError // the failure at the lowest offset

	// done runs once, on the goroutine that finished the last block,
	// after the file is closed.
	done func(err error)
}

// engine moves requests' blocks with a fixed set of workers. Requests are
// served first in, first out; each worker takes the next block of the
// oldest request, so up to workers blocks are in flight, and a request
// completes when its last block does.
//
// DeepSpeed's aio handle runs intra_op_parallelism threads, each with a
// libaio context of queue_depth slots, and gives each thread a contiguous
// 1/intra_op_parallelism of every request. A Go goroutine blocked in
// pread/pwrite is one I/O in flight, so the engine runs
// intra_op_parallelism × queue_depth workers: the same depth, one queue.
// The disk sees one sequential stream per request instead of one per
// thread.
type engine struct {
	block int

	mu    sync.Mutex
	cond  sync.Cond
	queue []*request
	stop  bool
	wg    sync.WaitGroup
}

func newEngine(block, workers int) *engine {
	e := &engine{block: block}
	e.cond.L = &e.mu
	e.wg.Add(workers)
	for range workers {
		go e.work()
	}
	return e
}

// run queues r, whose file is open. A request with no data completes at
// once, on the caller's goroutine.
func (e *engine) run(r *request) {
	if len(r.data) == 0 {
		e.finish(r)
		return
	}
	e.mu.Lock()
	r.left = 1 // the hand-out itself; dropped with the last block
	e.queue = append(e.queue, r)
	e.mu.Unlock()
	e.cond.Signal()
}

// close stops the workers once the queue is empty.
func (e *engine) close() {
	e.mu.Lock()
	e.stop = true
	e.mu.Unlock()
	e.cond.Broadcast()
	e.wg.Wait()
}

func (e *engine) work() {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		for len(e.queue) == 0 && !e.stop {
			e.cond.Wait()
		}
		if len(e.queue) == 0 {
			e.mu.Unlock()
			return
		}
		r := e.queue[0]
		off := r.next
		n := min(e.block, len(r.data)-off)
		r.next += n
		r.left++
		if r.next == len(r.data) {
			e.queue[0] = nil
			e.queue = e.queue[1:]
			r.left-- // every block is handed out
		}
		failed := r.err != nil
		more := len(e.queue) > 0
		e.mu.Unlock()
		if more {
			e.cond.Signal() // run signals one worker; each wakes the next
		}

		var err *IOError
		if !failed { // after a failure the rest of the request is skipped
			err = r.move(off, n, off/e.block)
		}

		e.mu.Lock()
		if err != nil && (r.err == nil || err.Offset < r.err.Offset) {
			r.err = err
		}
		r.left--
		last := r.left == 0
		e.mu.Unlock()
		if last {
			e.finish(r)
		}
	}
}

// move does one block, block number i: bytes [off, off+n) of r.data.
func (r *request) move(off, n, i int) *IOError {
	p := r.data[off : off+n]
	at := r.base + int64(off)
	var err error
	if r.write {
		if r.sums != nil {
			r.sums[i] = crc32.Checksum(p, castagnoli)
		}
		var got int
		got, err = r.file.WriteAt(p, at)
		if err == nil && got < n {
			err = fmt.Errorf("%w: the disk took %d of %d bytes", ErrShortWrite, got, n)
		}
	} else {
		var got int
		got, err = r.file.ReadAt(p, at)
		switch {
		case got == n:
			err = nil // ReadAt may say io.EOF with the last byte of the file
		case err == nil || errors.Is(err, io.EOF):
			err = fmt.Errorf("%w: the file ended after %d of %d bytes", ErrShortRead, got, n)
		}
		if err == nil && r.sums != nil {
			err = checkBlock(p, r.sums[i])
		}
	}
	if err == nil {
		return nil
	}
	op := "read"
	if r.write {
		op = "write"
	}
	return &IOError{Op: op, Key: r.key, Path: r.path, Offset: at, Len: int64(n), Err: err}
}

// finish closes r's file and reports r.
func (e *engine) finish(r *request) {
	var err error
	if r.err != nil {
		err = r.err
	}
	if cerr := r.file.Close(); cerr != nil && err == nil {
		err = &IOError{Op: "close", Key: r.key, Path: r.path, Err: cerr}
	}
	r.done(err)
}
