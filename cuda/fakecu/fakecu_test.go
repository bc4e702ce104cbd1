package fakecu

import (
	"errors"
	"math"
	"runtime"
	"testing"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/kernels"
)

// setup initialises d and makes device 0's primary context current on
// this (locked) thread.
func setup(t *testing.T, o Options) *Driver {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	d := New(o)
	must(t, d.Init())
	ctx, err := d.PrimaryCtxRetain(0)
	must(t, err)
	must(t, d.CtxSetCurrent(ctx))
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func code(err error) driver.Result {
	var e *driver.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

func TestNotInitialised(t *testing.T) {
	d := New(Options{})
	if _, err := d.DeviceCount(); code(err) != driver.ErrNotInitialized {
		t.Errorf("DeviceCount before Init = %v", err)
	}
}

func TestContextIsPerThread(t *testing.T) {
	if threadID() == 0 {
		t.Skip("threads are not told apart on this OS")
	}
	d := setup(t, Options{})
	s, err := d.StreamCreate(driver.StreamNonBlocking)
	must(t, err)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, err := d.MemAllocFromPoolAsync(16, poolHandle(0), s)
		done <- err
	}()
	if err := <-done; code(err) != driver.ErrInvalidContext {
		t.Errorf("allocation on a thread without a current context = %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
}

func TestEventWaitTakesLatestRecord(t *testing.T) {
	d := setup(t, Options{})
	s1, _ := d.StreamCreate(driver.StreamNonBlocking)
	s2, _ := d.StreamCreate(driver.StreamNonBlocking)
	e, _ := d.EventCreate(driver.EventDisableTiming)
	if done, err := d.EventQuery(e); !done || err != nil {
		t.Errorf("an event never recorded: done %v, %v", done, err)
	}
	gate := make(chan struct{})
	st := d.streams[s1]
	st.push(func() *driver.Error { <-gate; return nil }) // s1 is busy until the gate opens
	must(t, d.EventRecord(e, s1))
	must(t, d.StreamWaitEvent(s2, e))
	if done, _ := d.EventQuery(e); done {
		t.Error("event done before its stream reached it")
	}
	if idle, _ := d.StreamQuery(s2); idle {
		t.Error("s2 idle while waiting for s1's event")
	}
	close(gate)
	must(t, d.StreamSynchronize(s2))
	if done, _ := d.EventQuery(e); !done {
		t.Error("event not done after the waiting stream finished")
	}
}

func TestFaultIsSticky(t *testing.T) {
	d := setup(t, Options{})
	s, _ := d.StreamCreate(driver.StreamNonBlocking)
	e, _ := d.EventCreate(driver.EventDisableTiming)
	p, err := d.MemAllocFromPoolAsync(64, poolHandle(0), s)
	must(t, err)
	launch(t, d, s, "scale_f32", uint64(p), 1000, uint64(math.Float32bits(2))) // 1000 floats in 64 bytes
	must(t, d.EventRecord(e, s))
	err = d.EventSynchronize(e) // must not hang: records still complete after a fault
	if code(err) != driver.ErrIllegalAddress || !driver.IsSticky(err) {
		t.Fatalf("EventSynchronize after the fault = %v", err)
	}
	if _, err := d.MemAllocFromPoolAsync(8, poolHandle(0), s); code(err) != driver.ErrIllegalAddress {
		t.Errorf("a later call = %v, want the sticky error", err)
	}
}

// launch loads the fake module and launches kernel name with raw args.
func launch(t *testing.T, d *Driver, s driver.Stream, name string, args ...uint64) {
	t.Helper()
	nv := NewNVRTC()
	img, _, err := nv.Compile(kernels.Source(), kernels.ModuleName, kernels.Options(90))
	must(t, err)
	m, err := d.ModuleLoadData(img)
	must(t, err)
	f, err := d.ModuleGetFunction(m, name)
	must(t, err)
	vals := append([]uint64(nil), args...)
	ptrs := make([]unsafe.Pointer, len(vals))
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	must(t, d.LaunchKernel(f, driver.Dim3{X: 1, Y: 1, Z: 1}, driver.Dim3{X: 64, Y: 1, Z: 1}, 0, s, ptrs))
	for i := range vals {
		vals[i] = 0xdeadbeef // the launch copied the values: reusing them is allowed
	}
}

func TestLaunchCopiesParameters(t *testing.T) {
	d := setup(t, Options{})
	s, _ := d.StreamCreate(driver.StreamNonBlocking)
	p, err := d.MemAllocFromPoolAsync(4*100, poolHandle(0), s)
	must(t, err)
	launch(t, d, s, "fill_f32", uint64(p), 100, uint64(math.Float32bits(7)))
	out := make([]float32, 100)
	must(t, d.MemcpyDtoHAsync(unsafe.Pointer(&out[0]), p, 400, s)) // pageable: synchronous
	for i, v := range out {
		if v != 7 {
			t.Fatalf("out[%d] = %v", i, v)
		}
	}
}

func TestFreeIsStreamOrdered(t *testing.T) {
	d := setup(t, Options{Memory: 1 << 20})
	s, _ := d.StreamCreate(driver.StreamNonBlocking)
	p, err := d.MemAllocFromPoolAsync(4*100, poolHandle(0), s)
	must(t, err)
	launch(t, d, s, "fill_f32", uint64(p), 100, uint64(math.Float32bits(1))) // before the free: fine
	must(t, d.MemFreeAsync(p, s))
	if err := d.MemFreeAsync(p, s); code(err) != driver.ErrInvalidValue {
		t.Errorf("double free = %v", err)
	}
	if err := d.MemsetD8Async(p, 0, 4, s); code(err) != driver.ErrInvalidValue {
		t.Errorf("memset of freed memory = %v", err)
	}
	launch(t, d, s, "fill_f32", uint64(p), 100, uint64(math.Float32bits(1))) // after the free: a fault
	if err := d.StreamSynchronize(s); code(err) != driver.ErrIllegalAddress {
		t.Errorf("kernel on freed memory = %v, want an illegal address", err)
	}
}

func TestPoolThresholdAndOOM(t *testing.T) {
	d := setup(t, Options{Memory: 1000})
	s, _ := d.StreamCreate(driver.StreamNonBlocking)
	p, err := d.MemAllocFromPoolAsync(600, poolHandle(0), s)
	must(t, err)
	if _, err := d.MemAllocFromPoolAsync(600, poolHandle(0), s); !driver.IsOutOfMemory(err) {
		t.Errorf("600+600 of 1000 bytes = %v", err)
	}
	must(t, d.MemFreeAsync(p, s))
	must(t, d.StreamSynchronize(s))
	r, _ := d.MemPoolGetAttribute(poolHandle(0), driver.PoolReservedMemCurrent)
	if r != 0 {
		t.Errorf("reserved %d after a sync with release threshold 0", r)
	}
	must(t, d.MemPoolSetAttribute(poolHandle(0), driver.PoolReleaseThreshold, math.MaxUint64))
	p, _ = d.MemAllocFromPoolAsync(500, poolHandle(0), s)
	must(t, d.MemFreeAsync(p, s))
	must(t, d.StreamSynchronize(s))
	if r, _ := d.MemPoolGetAttribute(poolHandle(0), driver.PoolReservedMemCurrent); r != 500 {
		t.Errorf("reserved %d with an unlimited threshold, want 500 kept", r)
	}
	d.FailNext("cuMemAllocFromPoolAsync", 1)
	if _, err := d.MemAllocFromPoolAsync(1, poolHandle(0), s); !driver.IsOutOfMemory(err) {
		t.Errorf("injected failure = %v", err)
	}
}

func TestModuleChecks(t *testing.T) {
	d := setup(t, Options{Major: 8, Minor: 0})
	img, _, err := NewNVRTC().Compile(kernels.Source(), kernels.ModuleName, kernels.Options(90))
	must(t, err)
	if _, err := d.ModuleLoadData(img); code(err) != driver.ErrNoBinaryForGPU {
		t.Errorf("sm_90 image on sm_80 = %v", err)
	}
	if _, err := d.ModuleLoadData([]byte("\x7fELF...")); code(err) != driver.ErrInvalidImage {
		t.Errorf("garbage image = %v", err)
	}
	img, _, _ = NewNVRTC().Compile(kernels.Source(), kernels.ModuleName, kernels.Options(80))
	m, err := d.ModuleLoadData(img)
	must(t, err)
	if _, err := d.ModuleGetFunction(m, "no_such_kernel"); code(err) != driver.ErrNotFound {
		t.Errorf("unknown kernel = %v", err)
	}
	if _, log, err := NewNVRTC().Compile("#error nope\n", "x.cu", kernels.Options(80)); err == nil || log == "" {
		t.Errorf("compiling #error = %v, log %q", err, log)
	}
}

func TestBlasLtRejectsTF32(t *testing.T) {
	d := setup(t, Options{})
	l := NewBlasLt(d)
	h, _ := l.Create()
	desc, _ := l.MatmulDescCreate(driver.Compute32FFastTF32, driver.R32F)
	a, _ := l.MatrixLayoutCreate(driver.R32F, 4, 4, 4)
	p, _ := l.MatmulPreferenceCreate()
	if _, err := l.MatmulAlgoGetHeuristic(h, desc, a, a, a, a, p, 1); err == nil {
		t.Error("a TF32 matmul was accepted")
	}
}

func TestPageableAndPinnedCopies(t *testing.T) {
	d := setup(t, Options{})
	s, _ := d.StreamCreate(driver.StreamNonBlocking)
	p, _ := d.MemAllocFromPoolAsync(8, poolHandle(0), s)
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	must(t, d.MemcpyHtoDAsync(p, unsafe.Pointer(&src[0]), 8, s))
	src[0] = 99 // pageable: staged at the call, the copy sees the old byte
	pin, err := d.MemHostAlloc(8, driver.HostAllocPortable)
	must(t, err)
	must(t, d.MemcpyDtoHAsync(pin, p, 8, s))
	must(t, d.StreamSynchronize(s))
	if got := unsafe.Slice((*byte)(pin), 8); got[0] != 1 || got[7] != 8 {
		t.Errorf("pinned read back %v", got)
	}
	must(t, d.MemFreeHost(pin))
	if d.Pinned() != 0 {
		t.Errorf("%d pinned bytes after MemFreeHost", d.Pinned())
	}
}
