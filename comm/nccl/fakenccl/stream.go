package fakenccl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/cuda/driver"
)

// hostDevice is one rank's fake GPU: Run holds its mutex, as a GPU's
// worker thread runs one job at a time.
type hostDevice struct {
	net *Net
	mu  sync.Mutex
}

var _ nccl.Device = (*hostDevice)(nil)

func (d *hostDevice) Run(fn func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fn()
}

func (d *hostDevice) NewStream() (nccl.Stream, error) {
	s := &stream{net: d.net}
	s.cond = sync.NewCond(&s.mu)
	d.net.mu.Lock()
	d.net.next++
	s.h = driver.Stream(d.net.next)
	d.net.streams[s.h] = s
	d.net.mu.Unlock()
	return s, nil
}

// stream runs its work in order on a goroutine that starts when work
// arrives and ends when the queue is empty.
type stream struct {
	net *Net
	h   driver.Stream

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []func()
	enq, done uint64
	running   bool
	destroyed bool
}

var _ nccl.Stream = (*stream)(nil)

func (s *stream) Handle() driver.Stream { return s.h }

// push queues work and returns its position.
func (s *stream) push(work func()) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, work)
	s.enq++
	if !s.running {
		s.running = true
		go s.run()
	}
	return s.enq
}

func (s *stream) run() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		w()
		s.mu.Lock()
		s.done++
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// reached reports whether work up to seq has completed.
func (s *stream) reached(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done >= seq
}

func (s *stream) waitFor(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < seq {
		s.cond.Wait()
	}
}

// marker is a position in a stream.
type marker struct {
	s   *stream
	seq uint64
}

func (m *marker) Done() (bool, error) { return m.s.reached(m.seq), nil }
func (m *marker) Release()            {}

func (s *stream) Record() (nccl.Marker, error) {
	if err := s.live("Record"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &marker{s: s, seq: s.enq}, nil
}

func (s *stream) After(m nccl.Marker) error {
	fm, ok := m.(*marker)
	if !ok {
		return fmt.Errorf("fakenccl: a %T marker on a fake stream", m)
	}
	s.push(func() { fm.s.waitFor(fm.seq) })
	return nil
}

func (s *stream) live(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("fakenccl: %s on a destroyed stream", what)
	}
	return nil
}

// Stage uses the host memory itself: the fake device addresses it.
func (s *stream) Stage(host []byte, upload bool) (nccl.Staged, error) {
	if err := s.live("Stage"); err != nil {
		return nil, err
	}
	st := &staged{}
	if len(host) > 0 {
		st.ptr = driver.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(host))))
		st.keep = host
	}
	return st, nil
}

func (s *stream) Destroy() error {
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	s.waitFor(seq)
	s.mu.Lock()
	s.destroyed = true
	s.mu.Unlock()
	s.net.mu.Lock()
	delete(s.net.streams, s.h)
	s.net.mu.Unlock()
	return nil
}

// staged is host memory used in place.
type staged struct {
	ptr  driver.DevicePtr
	keep []byte // keeps the memory alive while NCCL holds its address
}

func (st *staged) Ptr() driver.DevicePtr   { return st.ptr }
func (st *staged) Return(off, n int) error { return nil }
func (st *staged) Finish(ok bool) error {
	st.keep = nil
	return nil
}
