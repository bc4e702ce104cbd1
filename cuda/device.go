package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/dszero/dszero/cuda/driver"
)

// Config says which device to open and how to run it.
type Config struct {
	// LibDirs are searched first for the CUDA libraries (--cuda-lib-dir).
	LibDirs []string
	// Ordinal is the device index (CUDA's numbering).
	Ordinal int
	// CacheDir holds compiled kernels; "" is os.UserCacheDir()/dszero/cuda,
	// "off" disables the cache.
	CacheDir string
	// PoolReleaseThreshold is how many bytes the stream-ordered memory
	// pool keeps cached across synchronisations; 0 keeps everything (the
	// pool then behaves like PyTorch's caching allocator).
	PoolReleaseThreshold uint64
}

// Libs are the libraries a Device runs on: the real ones (Open) or the
// fake ones of package fakecu (OpenWith in tests).
type Libs struct {
	Driver driver.Driver
	NVRTC  driver.NVRTC
	BlasLt driver.BlasLt
	// Info describes them for logs: paths and versions.
	Info string
}

// Device is one CUDA GPU, with its primary context current on a worker
// goroutine locked to one OS thread. All work is issued through Do (or
// the convenience methods that call it) on that worker; blocking waits
// run on the waiting goroutine's own locked thread instead, so a long
// synchronisation never stops other goroutines from issuing work.
type Device struct {
	libs Libs
	cfg  Config

	ordinal      int
	dev          driver.Device
	ctx          driver.Context
	name         string
	major, minor int
	sms          int
	totalMem     uint64
	pool         driver.MemPool

	jobs chan job
	q    *Issuer // owned by the worker goroutine

	// life is held shared by every Do and exclusively by Close, so no job
	// is sent after the worker has gone.
	life   sync.RWMutex
	closed bool

	mu     sync.Mutex
	failed error // a *DeviceFailedError once a sticky error happened

	kernelsOnce sync.Once
	compiled    compiled // the kernels' CUBIN, set once
	kernels     *Kernels // loaded on the worker

	aux *Stream // the device's own stream for Upload and Download
}

type job struct {
	fn   func(q *Issuer) error
	done chan result
}

// result is a job's outcome; a panic in fn (a caller's bug) is carried
// back and re-raised in the caller's goroutine.
type result struct {
	err      error
	panicked any
}

// Open loads the CUDA libraries and opens device cfg.Ordinal. Without a
// usable CUDA (no driver, no GPU, libraries missing or too old) the error
// wraps ErrNoCUDA and says what was tried.
func Open(cfg Config) (*Device, error) {
	l, err := driver.Load(cfg.LibDirs...)
	if err != nil {
		return nil, err
	}
	return OpenWith(Libs{Driver: l.Driver, NVRTC: l.NVRTC, BlasLt: l.BlasLt, Info: l.Versions()}, cfg)
}

// OpenWith opens device cfg.Ordinal on the given libraries.
func OpenWith(l Libs, cfg Config) (*Device, error) {
	d := &Device{libs: l, cfg: cfg, ordinal: cfg.Ordinal, jobs: make(chan job)}
	started := make(chan error, 1)
	go d.worker(started)
	if err := <-started; err != nil {
		return nil, err
	}
	aux, err := d.NewStream()
	if err != nil {
		d.Close()
		return nil, err
	}
	d.aux = aux
	return d, nil
}

// worker runs every job of the device on one locked OS thread with the
// device's primary context current. CUDA's current context is per thread:
// one thread that owns it means it is set once, and the device's issue
// state (the launch argument arena, caches) is touched by one goroutine
// only, without locks.
func (d *Device) worker(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.setup(); err != nil {
		started <- err
		return
	}
	d.q = newIssuer(d)
	defer d.q.release()
	started <- nil
	for j := range d.jobs {
		if j.fn == nil { // Close
			j.done <- result{err: d.teardown()}
			return
		}
		j.done <- d.run(j.fn)
	}
}

func (d *Device) run(fn func(q *Issuer) error) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r.panicked = p
		}
	}()
	return result{err: fn(d.q)}
}

func (d *Device) setup() error {
	drv := d.libs.Driver
	if err := drv.Init(); err != nil {
		var e *driver.Error
		if errors.As(err, &e) && (e.Code == driver.ErrNoDevice || e.Code == driver.ErrInvalidDevice) {
			return fmt.Errorf("%w: cuInit found no GPU (%v); libraries: %s", driver.ErrNoCUDA, err, d.libs.Info)
		}
		return fmt.Errorf("cuda: %w", err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the driver sees no GPU; libraries: %s", driver.ErrNoCUDA, d.libs.Info)
	}
	if d.ordinal < 0 || d.ordinal >= n {
		return fmt.Errorf("cuda: device %d requested, the machine has %d (0..%d)", d.ordinal, n, n-1)
	}
	if d.dev, err = drv.DeviceGet(d.ordinal); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if d.name, err = drv.DeviceName(d.dev); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	attrs := []struct {
		a   driver.DeviceAttr
		dst *int
	}{{driver.AttrComputeCapabilityMajor, &d.major}, {driver.AttrComputeCapabilityMinor, &d.minor}, {driver.AttrMultiprocessorCount, &d.sms}}
	for _, a := range attrs {
		if *a.dst, err = drv.DeviceAttribute(a.a, d.dev); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
	}
	pools, err := drv.DeviceAttribute(driver.AttrMemoryPoolsSupported, d.dev)
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if pools == 0 {
		return fmt.Errorf("cuda: device %d (%s) does not support stream-ordered memory pools (cuMemAllocFromPoolAsync)", d.ordinal, d.name)
	}
	if d.totalMem, err = drv.DeviceTotalMem(d.dev); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if d.ctx, err = drv.PrimaryCtxRetain(d.dev); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if err = drv.CtxSetCurrent(d.ctx); err == nil {
		d.pool, err = drv.DeviceGetDefaultMemPool(d.dev)
	}
	if err == nil {
		th := d.cfg.PoolReleaseThreshold
		if th == 0 {
			th = math.MaxUint64
		}
		err = drv.MemPoolSetAttribute(d.pool, driver.PoolReleaseThreshold, th)
	}
	if err != nil {
		drv.PrimaryCtxRelease(d.dev)
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

func (d *Device) teardown() error {
	var errs []error
	if d.kernels != nil {
		errs = append(errs, d.kernels.unload())
	}
	errs = append(errs, d.q.dropBlas())
	errs = append(errs, d.q.hostCache.drop(d))
	errs = append(errs, d.q.dropEvents())
	errs = append(errs, d.libs.Driver.PrimaryCtxRelease(d.dev))
	return errors.Join(errs...)
}

// Do runs fn on the device's worker and returns its error. Everything fn
// does through q is issued in order from one thread; batching many
// operations into one Do costs one hand-off (about a microsecond) instead
// of one per operation. fn must not block on the GPU (no Synchronize):
// waits belong outside Do.
//
// A sticky error marks the device failed: this and every later call
// return a *DeviceFailedError.
func (d *Device) Do(fn func(q *Issuer) error) error {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return ErrClosed
	}
	if err := d.Failed(); err != nil {
		return err
	}
	done := make(chan result, 1)
	d.jobs <- job{fn: fn, done: done}
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	return d.check(r.err)
}

// check marks the device failed on a sticky error.
func (d *Device) check(err error) error {
	if err == nil || !driver.IsSticky(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed == nil {
		d.failed = &DeviceFailedError{Ordinal: d.ordinal, Cause: err}
	}
	return d.failed
}

// Failed returns the *DeviceFailedError of a failed device, or nil.
func (d *Device) Failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// onThread runs a blocking driver call on the calling goroutine, locked
// to its thread with the primary context current (cuCtxSetCurrent is a
// thread-local store, cheap next to any wait).
func (d *Device) onThread(fn func() error) error {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return ErrClosed
	}
	if err := d.Failed(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.libs.Driver.CtxSetCurrent(d.ctx); err != nil {
		return d.check(err)
	}
	return d.check(fn())
}

// Close releases the device's kernels, cached pinned memory and its hold
// on the primary context. Streams, events and memory the caller allocated
// should be released first.
func (d *Device) Close() error {
	if d.aux != nil {
		d.aux.Destroy()
		d.aux = nil
	}
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	done := make(chan result, 1)
	d.jobs <- job{done: done}
	return (<-done).err
}

// Ordinal is the device's CUDA index.
func (d *Device) Ordinal() int { return d.ordinal }

// Name is the GPU's name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// ComputeCapability is the SM version, e.g. 9, 0 for sm_90.
func (d *Device) ComputeCapability() (major, minor int) { return d.major, d.minor }

// Arch is 10·major + minor, the XY of sm_XY.
func (d *Device) Arch() int { return 10*d.major + d.minor }

// Multiprocessors is the number of SMs.
func (d *Device) Multiprocessors() int { return d.sms }

// TotalMemory is the device's memory in bytes.
func (d *Device) TotalMemory() uint64 { return d.totalMem }

// LibInfo describes the loaded libraries.
func (d *Device) LibInfo() string { return d.libs.Info }

func (d *Device) String() string {
	return fmt.Sprintf("cuda:%d (%s, sm_%d, %d SMs, %.1f GiB)", d.ordinal, d.name, d.Arch(), d.sms, float64(d.totalMem)/(1<<30))
}
