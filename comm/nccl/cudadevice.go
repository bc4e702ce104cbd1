package nccl

import (
	"fmt"
	"sync"

	"github.com/dszero/dszero/cuda"
	"github.com/dszero/dszero/cuda/driver"
)

// CUDADevice is Device over a package cuda device: NCCL calls run on the
// device's worker thread (cuda.Device.Do), streams are cuda streams, and
// markers are events. Staging goes through pinned host memory: the host
// bytes are copied into a pinned block, uploaded into device memory from
// the stream-ordered pool on the collective's stream, and copied back the
// same way.
type CUDADevice struct{ d *cuda.Device }

var _ Device = (*CUDADevice)(nil)

// NewCUDADevice is the Device of d. One process drives one GPU (the one
// LOCAL_RANK picks); NCCL needs its primary context, which d uses.
func NewCUDADevice(d *cuda.Device) *CUDADevice { return &CUDADevice{d: d} }

func (g *CUDADevice) Run(fn func() error) error {
	return g.d.Do(func(*cuda.Issuer) error { return fn() })
}

func (g *CUDADevice) NewStream() (Stream, error) {
	s, err := g.d.NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaStream{d: g.d, s: s}, nil
}

// EventMarker is a marker at e's latest record, for Comm.Group's after:
// the collectives wait for the work e marks (a compute stream's gradients).
func EventMarker(e *cuda.Event) Marker { return &cudaMarker{e: e} }

// EventOf is the CUDA event of a marker of a CUDA stream (for
// cuda.Issuer.WaitEvent on a compute stream), or nil for another kind.
func EventOf(m Marker) *cuda.Event {
	if cm, ok := m.(*cudaMarker); ok {
		return cm.e
	}
	return nil
}

type cudaStream struct {
	d *cuda.Device
	s *cuda.Stream

	mu    sync.Mutex
	spare []*cuda.Event
}

func (st *cudaStream) Handle() driver.Stream { return st.s.Handle() }

func (st *cudaStream) Record() (Marker, error) {
	st.mu.Lock()
	var e *cuda.Event
	if n := len(st.spare); n > 0 {
		e, st.spare = st.spare[n-1], st.spare[:n-1]
	}
	st.mu.Unlock()
	if e == nil {
		var err error
		if e, err = st.d.NewEvent(); err != nil {
			return nil, err
		}
	}
	if err := st.d.Do(func(q *cuda.Issuer) error { return q.Record(e, st.s) }); err != nil {
		e.Destroy()
		return nil, err
	}
	return &cudaMarker{e: e, st: st}, nil
}

func (st *cudaStream) After(m Marker) error {
	cm, ok := m.(*cudaMarker)
	if !ok {
		panic(fmt.Sprintf("nccl: a %T marker on a CUDA stream", m))
	}
	return st.d.Do(func(q *cuda.Issuer) error { return q.WaitEvent(st.s, cm.e) })
}

func (st *cudaStream) Destroy() error {
	st.mu.Lock()
	spare := st.spare
	st.spare = nil
	st.mu.Unlock()
	for _, e := range spare {
		e.Destroy()
	}
	return st.s.Destroy()
}

// cudaMarker is an event; st is the stream whose spare list it returns
// to (nil for EventMarker's, which the caller owns).
type cudaMarker struct {
	e  *cuda.Event
	st *cudaStream
}

func (m *cudaMarker) Done() (bool, error) { return m.e.Done() }

func (m *cudaMarker) Release() {
	if m.st == nil {
		return
	}
	m.st.mu.Lock()
	m.st.spare = append(m.st.spare, m.e)
	m.st.mu.Unlock()
}

func (st *cudaStream) Stage(host []byte, upload bool) (Staged, error) {
	sg := &cudaStaged{st: st, host: host}
	if len(host) == 0 {
		return sg, nil
	}
	n := int64(len(host))
	err := st.d.Do(func(q *cuda.Issuer) error {
		var err error
		if sg.pin, err = q.AllocHost(n); err != nil {
			return err
		}
		if sg.mem, err = q.Alloc(n, st.s); err != nil {
			q.FreeHost(sg.pin, nil)
			sg.pin = nil
			return err
		}
		if upload {
			copy(sg.pin.Bytes(), host)
			return q.CopyToDevice(st.s, sg.mem, sg.pin, 0)
		}
		return nil
	})
	if err != nil {
		sg.Finish(false)
		return nil, fmt.Errorf("nccl: staging %d bytes of host memory on the GPU: %w", n, err)
	}
	return sg, nil
}

// cudaStaged is host memory's copy on the device, and the pinned block
// it travels through.
type cudaStaged struct {
	st      *cudaStream
	host    []byte
	pin     *cuda.HostBuffer
	mem     cuda.Mem
	returns [][2]int // byte ranges queued back
}

func (sg *cudaStaged) Ptr() driver.DevicePtr { return sg.mem.Ptr() }

func (sg *cudaStaged) Return(off, n int) error {
	if n == 0 {
		return nil
	}
	sg.returns = append(sg.returns, [2]int{off, n})
	return sg.st.d.Do(func(q *cuda.Issuer) error {
		return q.CopyToHost(sg.st.s, sg.pin, int64(off), sg.mem.Slice(int64(off), int64(n)))
	})
}

func (sg *cudaStaged) Finish(ok bool) error {
	if sg.pin == nil {
		return nil
	}
	if ok {
		b := sg.pin.Bytes()
		for _, r := range sg.returns {
			copy(sg.host[r[0]:r[0]+r[1]], b[r[0]:r[0]+r[1]])
		}
	}
	pin, mem := sg.pin, sg.mem
	sg.pin = nil
	return sg.st.d.Do(func(q *cuda.Issuer) error {
		err := q.Free(mem, sg.st.s)
		if ferr := q.FreeHost(pin, sg.st.s); err == nil {
			err = ferr
		}
		return err
	})
}
