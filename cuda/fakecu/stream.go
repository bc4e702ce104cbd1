package fakecu

import (
	"sync"

	"github.com/dszero/dszero/cuda/driver"
)

// op is one operation of a stream; run returns a sticky error if it
// faulted. A sync op (an event record or wait, a free) runs even after a
// fault, so nothing waiting on it hangs; other ops are skipped then, as a
// dead context runs nothing.
type op struct {
	run  func() *driver.Error
	sync bool
}

// stream runs its operations in order on its own goroutine, which starts
// when work arrives and exits when the queue is empty.
type stream struct {
	d   *Driver
	dev int

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []op
	enq, done uint64 // operations enqueued and completed
	running   bool
	destroyed bool
}

func newStream(d *Driver, dev int) *stream {
	s := &stream{d: d, dev: dev}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// push enqueues work and returns its sequence number.
func (s *stream) push(work func() *driver.Error) uint64 { return s.enqueue(op{run: work}) }

// pushSync enqueues a sync op.
func (s *stream) pushSync(f func() *driver.Error) uint64 { return s.enqueue(op{run: f, sync: true}) }

func (s *stream) enqueue(o op) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, o)
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
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
		o := s.queue[0]
		s.queue[0] = op{}
		s.queue = s.queue[1:]
		s.mu.Unlock()

		s.d.mu.Lock()
		dead := s.d.sticky != nil
		s.d.mu.Unlock()
		if !dead || o.sync {
			if e := o.run(); e != nil {
				s.d.setSticky(e)
			}
		}

		s.mu.Lock()
		s.done++
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// waitSeq blocks until operation seq has completed.
func (s *stream) waitSeq(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < seq {
		s.cond.Wait()
	}
}

// drain blocks until everything enqueued so far has completed.
func (s *stream) drain() {
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	s.waitSeq(seq)
}

func (s *stream) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done == s.enq
}

// event completes each record when its stream reaches it.
type event struct {
	mu                  sync.Mutex
	cond                *sync.Cond
	recorded, completed uint64
}

func newEvent() *event {
	e := &event{}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *event) waitFor(n uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.completed < n {
		e.cond.Wait()
	}
}

func (d *Driver) streamOf(fn string, h driver.Stream) (*stream, error) {
	s := d.streams[h]
	if s == nil || s.destroyed {
		return nil, errorOf(fn, driver.ErrInvalidHandle)
	}
	return s, nil
}

func (d *Driver) eventOf(fn string, h driver.Event) (*event, error) {
	e := d.events[h]
	if e == nil {
		return nil, errorOf(fn, driver.ErrInvalidHandle)
	}
	return e, nil
}

func (d *Driver) StreamCreate(flags uint32) (driver.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.enter("cuStreamCreate", true)
	if err != nil {
		return 0, err
	}
	h := driver.Stream(d.handle())
	d.streams[h] = newStream(d, dev)
	return h, nil
}

// StreamDestroy returns at once; work already queued still runs (as CUDA
// does), and the handle is invalid from now on.
func (d *Driver) StreamDestroy(h driver.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuStreamDestroy", true); err != nil {
		return err
	}
	s, err := d.streamOf("cuStreamDestroy", h)
	if err != nil {
		return err
	}
	s.destroyed = true
	delete(d.streams, h)
	return nil
}

func (d *Driver) StreamSynchronize(h driver.Stream) error {
	const fn = "cuStreamSynchronize"
	d.mu.Lock()
	dev, err := d.enter(fn, true)
	var s *stream
	if err == nil {
		s, err = d.streamOf(fn, h)
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	s.drain()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pools[dev].synchronized()
	return d.stickyErr(fn)
}

func (d *Driver) StreamQuery(h driver.Stream) (bool, error) {
	const fn = "cuStreamQuery"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return false, err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return false, err
	}
	return s.idle(), nil
}

func (d *Driver) StreamWaitEvent(h driver.Stream, eh driver.Event) error {
	const fn = "cuStreamWaitEvent"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	e, err := d.eventOf(fn, eh)
	if err != nil {
		return err
	}
	e.mu.Lock()
	n := e.recorded // the most recent record at the time of the call
	e.mu.Unlock()
	s.pushSync(func() *driver.Error {
		e.waitFor(n)
		return nil
	})
	return nil
}

func (d *Driver) EventCreate(flags uint32) (driver.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuEventCreate", true); err != nil {
		return 0, err
	}
	h := driver.Event(d.handle())
	d.events[h] = newEvent()
	return h, nil
}

func (d *Driver) EventDestroy(h driver.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuEventDestroy", true); err != nil {
		return err
	}
	if _, err := d.eventOf("cuEventDestroy", h); err != nil {
		return err
	}
	delete(d.events, h)
	return nil
}

func (d *Driver) EventRecord(h driver.Event, sh driver.Stream) error {
	const fn = "cuEventRecord"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	e, err := d.eventOf(fn, h)
	if err != nil {
		return err
	}
	s, err := d.streamOf(fn, sh)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.recorded++
	n := e.recorded
	e.mu.Unlock()
	s.pushSync(func() *driver.Error {
		e.mu.Lock()
		e.completed = max(e.completed, n)
		e.cond.Broadcast()
		e.mu.Unlock()
		return nil
	})
	return nil
}

func (d *Driver) EventSynchronize(h driver.Event) error {
	const fn = "cuEventSynchronize"
	d.mu.Lock()
	dev, err := d.enter(fn, true)
	var e *event
	if err == nil {
		e, err = d.eventOf(fn, h)
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	e.mu.Lock()
	n := e.recorded
	e.mu.Unlock()
	e.waitFor(n)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pools[dev].synchronized()
	return d.stickyErr(fn)
}

func (d *Driver) EventQuery(h driver.Event) (bool, error) {
	const fn = "cuEventQuery"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return false, err
	}
	e, err := d.eventOf(fn, h)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.completed >= e.recorded, nil
}
