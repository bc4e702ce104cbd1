package cuda

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/fakecu"
	"github.com/dszero/dszero/device"
)

type fakeRig struct {
	d   *Device
	drv *fakecu.Driver
	nv  *fakecu.NVRTC
	lt  *fakecu.BlasLt
}

func openFake(t *testing.T, o fakecu.Options, cfg Config) fakeRig {
	t.Helper()
	r := fakeRig{drv: fakecu.New(o), nv: fakecu.NewNVRTC()}
	r.lt = fakecu.NewBlasLt(r.drv)
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	d, err := OpenWith(Libs{Driver: r.drv, NVRTC: r.nv, BlasLt: r.lt, Info: "fakecu"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	t.Cleanup(func() {
		if err := d.Close(); err != nil && d.Failed() == nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestOpenDescribesDevice(t *testing.T) {
	r := openFake(t, fakecu.Options{Name: "Fake H200", Major: 9, Minor: 0, SMs: 132, Memory: 2 << 30}, Config{})
	d := r.d
	if d.Name() != "Fake H200" || d.Arch() != 90 || d.Multiprocessors() != 132 || d.TotalMemory() != 2<<30 {
		t.Errorf("device = %v", d)
	}
	if r.drv.ContextRefs(0) != 1 {
		t.Errorf("primary context retained %d times, want 1", r.drv.ContextRefs(0))
	}
}

func TestCloseReleasesContext(t *testing.T) {
	drv := fakecu.New(fakecu.Options{})
	d, err := OpenWith(Libs{Driver: drv, NVRTC: fakecu.NewNVRTC(), BlasLt: fakecu.NewBlasLt(drv)}, Config{CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if drv.ContextRefs(0) != 0 {
		t.Errorf("context still retained after Close")
	}
	if _, err := d.NewStream(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewStream after Close = %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestOpenBadOrdinal(t *testing.T) {
	drv := fakecu.New(fakecu.Options{Devices: 2})
	_, err := OpenWith(Libs{Driver: drv, NVRTC: fakecu.NewNVRTC(), BlasLt: fakecu.NewBlasLt(drv)}, Config{Ordinal: 2})
	if err == nil || err.Error() != "cuda: device 2 requested, the machine has 2 (0..1)" {
		t.Errorf("Open(ordinal 2 of 2) = %v", err)
	}
}

// TestOpenWithoutCUDA is what `--device cuda` reports on a machine with
// no CUDA: one error, wrapping ErrNoCUDA, naming the paths tried.
func TestOpenWithoutCUDA(t *testing.T) {
	if _, _, err := driver.LoadDriver(); err == nil {
		t.Skip("this machine has a CUDA driver")
	}
	dir := t.TempDir()
	_, err := Open(Config{LibDirs: []string{dir}})
	if !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("Open = %v, want ErrNoCUDA", err)
	}
	var nc *NoCUDAError
	if !errors.As(err, &nc) || !bytes.Contains([]byte(err.Error()), []byte(filepath.Join(dir, "libcuda.so.1"))) {
		t.Errorf("Open error does not list %s:\n%v", dir, err)
	}
}

func TestUploadDownloadRoundTrip(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	data := make([]byte, 100003)
	for i := range data {
		data[i] = byte(i * 7)
	}
	m, err := d.Alloc(int64(len(data)), d.aux)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(m, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := d.Download(got, m, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("round trip changed the bytes")
	}
	// A view: bytes [10, 20) only.
	part := make([]byte, 10)
	if err := d.Download(part, m.Slice(10, 10), nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(part, data[10:20]) {
		t.Error("view download differs")
	}
	if err := d.Free(m, d.aux); err != nil {
		t.Fatal(err)
	}
	if err := d.aux.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.drv.Live(0); n != 0 {
		t.Errorf("%d bytes live after Free", n)
	}
}

// TestStreamsOrderedByEvents: a copy on one stream, an event, and work
// on another stream that waits for it: the race detector sees the fake's
// memory accesses, so a missing dependency would be a reported race.
func TestStreamsOrderedByEvents(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	s1, _ := d.NewStream()
	s2, _ := d.NewStream()
	defer s1.Destroy()
	defer s2.Destroy()
	e, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	const n = 1 << 16
	var a, b Mem
	var h, out *HostBuffer
	err = d.Do(func(q *Issuer) (err error) {
		if a, err = q.Alloc(n, s1); err != nil {
			return err
		}
		if b, err = q.Alloc(n, s1); err != nil {
			return err
		}
		if h, err = q.AllocHost(n); err != nil {
			return err
		}
		if out, err = q.AllocHost(n); err != nil {
			return err
		}
		for i := range h.Bytes() {
			h.Bytes()[i] = byte(i)
		}
		if err := q.CopyToDevice(s1, a, h, 0); err != nil {
			return err
		}
		if err := q.Record(e, s1); err != nil {
			return err
		}
		if err := q.WaitEvent(s2, e); err != nil {
			return err
		}
		if err := q.Copy(s2, b, a); err != nil {
			return err
		}
		return q.CopyToHost(s2, out, 0, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), h.Bytes()) {
		t.Error("data did not flow s1 → event → s2")
	}
	if done, err := e.Done(); !done || err != nil {
		t.Errorf("event Done = %v, %v", done, err)
	}
	d.Do(func(q *Issuer) error {
		q.FreeHost(h, s1)
		q.FreeHost(out, s2)
		q.Free(a, s2)
		return q.Free(b, s2)
	})
}

func TestOOMIsDistinguishable(t *testing.T) {
	r := openFake(t, fakecu.Options{Memory: 1 << 20}, Config{})
	d := r.d
	m, err := d.Alloc(600<<10, d.aux)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(600<<10, d.aux)
	var oom *OOMError
	if !errors.As(err, &oom) || !driver.IsOutOfMemory(err) {
		t.Fatalf("second allocation = %v, want *OOMError", err)
	}
	if oom.Requested != 600<<10 || oom.Used != 600<<10 || oom.Total != 1<<20 {
		t.Errorf("OOMError = %+v", oom)
	}
	// Not sticky: the device still works.
	if err := d.Free(m, d.aux); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(600<<10, d.aux); err != nil {
		t.Errorf("allocation after freeing = %v", err)
	}
	r.drv.FailNext("cuMemHostAlloc", 1)
	if _, err := d.AllocHost(10); !errors.As(err, &oom) {
		t.Errorf("pinned allocation failure = %v, want *OOMError", err)
	}
}

func TestPoolKeepsFreedMemory(t *testing.T) {
	r := openFake(t, fakecu.Options{Memory: 64 << 20}, Config{})
	d := r.d
	for range 3 {
		m, err := d.Alloc(8<<20, d.aux)
		if err != nil {
			t.Fatal(err)
		}
		d.Free(m, d.aux)
		d.aux.Synchronize()
	}
	st, err := d.MemStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Used != 0 || st.Reserved != 8<<20 || st.UsedHigh != 8<<20 {
		t.Errorf("MemStats = %+v: freed memory should stay reserved (release threshold: keep all)", st)
	}
	if err := d.TrimPool(0); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.MemStats(); st.Reserved != 0 {
		t.Errorf("reserved %d after TrimPool(0)", st.Reserved)
	}
}

func TestHostCacheReusesAfterUse(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	h1, err := d.AllocHost(100 << 10)
	if err != nil {
		t.Fatal(err)
	}
	p1 := h1.p
	if err := d.FreeHost(h1, d.aux); err != nil {
		t.Fatal(err)
	}
	d.aux.Synchronize()
	h2, err := d.AllocHost(120 << 10) // same 128 KiB class
	if err != nil {
		t.Fatal(err)
	}
	if h2.p != p1 {
		t.Error("a freed block of the same class was not reused")
	}
	if st, _ := d.HostStats(); st.Live != 128<<10 || st.Cached != 0 {
		t.Errorf("HostStats = %+v", st)
	}
	if r.drv.Pinned() != 128<<10 {
		t.Errorf("%d bytes pinned, want one 128 KiB block", r.drv.Pinned())
	}
	d.FreeHost(h2, nil)
	if err := d.TrimHostCache(); err != nil {
		t.Fatal(err)
	}
	if r.drv.Pinned() != 0 {
		t.Errorf("%d bytes still pinned after TrimHostCache", r.drv.Pinned())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("HostBuffer used after FreeHost did not panic")
			}
		}()
		h2.Bytes()
	}()
}

func TestHostClass(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{{1, 64 << 10}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10}, {1 << 30, 1 << 30}, {1<<30 + 1, 1<<30 + 64<<20}} {
		if got := hostClass(c.n); got != c.want {
			t.Errorf("hostClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestStickyErrorFailsDevice: a kernel reading outside its allocation is
// an illegal address; the device is failed from then on.
func TestStickyErrorFailsDevice(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	k, err := d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := d.Alloc(64, d.aux)
	err = d.Do(func(q *Issuer) error {
		// 1000 floats in a 64-byte allocation: the launch is accepted, the
		// kernel faults on the stream.
		return q.Launch(d.aux, "scale_f32", Dim3{X: 1, Y: 1, Z: 1}, Dim3{X: 32, Y: 1, Z: 1}, P(m), I64(1000), F32(2))
	})
	if err != nil {
		t.Fatalf("launch = %v (faults are reported later)", err)
	}
	err = d.aux.Synchronize()
	var fe *DeviceFailedError
	if !errors.As(err, &fe) || !driver.IsSticky(err) {
		t.Fatalf("Synchronize after the fault = %v, want *DeviceFailedError", err)
	}
	if _, err := d.Alloc(8, d.aux); !errors.As(err, &fe) {
		t.Errorf("Alloc on a failed device = %v", err)
	}
	_ = k
}

// TestEveryCallOnTheContextThread: the fake checks each call's thread has
// the context current; a device used from many goroutines at once must
// still issue everything correctly.
func TestEveryCallOnTheContextThread(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.NewStream()
			if err != nil {
				errs <- err
				return
			}
			defer s.Destroy()
			for i := range 20 {
				m, err := d.Alloc(int64(256*(g+1)+i), s)
				if err == nil {
					err = d.Free(m, s)
				}
				if err == nil {
					err = s.Synchronize()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestKernelCache(t *testing.T) {
	dir := t.TempDir()
	r := openFake(t, fakecu.Options{}, Config{CacheDir: dir})
	k, err := r.d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	if k.Info.CacheHit || r.nv.Compiles() != 1 || k.Info.CacheError != nil {
		t.Fatalf("first load: %+v, %d compilations", k.Info, r.nv.Compiles())
	}
	if filepath.Dir(k.Info.CachePath) != dir {
		t.Errorf("cache file %s not in %s", k.Info.CachePath, dir)
	}
	// Another process (device) with the same GPU and NVRTC: a cache hit.
	r2 := openFake(t, fakecu.Options{}, Config{CacheDir: dir})
	k2, err := r2.d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	if !k2.Info.CacheHit || r2.nv.Compiles() != 0 {
		t.Errorf("second load: hit %v, %d compilations", k2.Info.CacheHit, r2.nv.Compiles())
	}
	// Another architecture: another key, another file.
	r3 := openFake(t, fakecu.Options{Major: 8, Minor: 0}, Config{CacheDir: dir})
	k3, err := r3.d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	if k3.Info.CacheHit || k3.Info.CachePath == k.Info.CachePath {
		t.Errorf("sm_80 reused the sm_90 cache entry %s", k3.Info.CachePath)
	}
	// A damaged file is recompiled and rewritten.
	data, _ := os.ReadFile(k.Info.CachePath)
	data[len(data)-2] ^= 0xff
	os.WriteFile(k.Info.CachePath, data, 0o644)
	r4 := openFake(t, fakecu.Options{}, Config{CacheDir: dir})
	k4, err := r4.d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	if k4.Info.CacheHit || r4.nv.Compiles() != 1 {
		t.Errorf("damaged cache file was used: %+v", k4.Info)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name()[0] == '.' {
			t.Errorf("temporary file %s left in the cache", e.Name())
		}
	}
}

func TestKernelArchUnsupported(t *testing.T) {
	r := openFake(t, fakecu.Options{Major: 12, Minor: 1}, Config{})
	_, err := r.d.LoadKernels()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("cannot generate code for sm_121")) {
		t.Errorf("LoadKernels on sm_121 = %v", err)
	}
}

func TestLaunchChecksArguments(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	if _, err := d.LoadKernels(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]Arg{
		{Null(), I64(1)},                   // too few
		{I64(1), I64(1), F32(1)},           // an int for a pointer
		{Null(), I32(1), F32(1)},           // an int for a long long
		{Null(), I64(1), I32(1)},           // an int for a float
		{Null(), I64(1), F32(1), P(Mem{})}, // too many
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("scale_f32 launched with %v", args)
				}
			}()
			d.Do(func(q *Issuer) error {
				return q.Launch(d.aux, "scale_f32", Dim3{X: 1, Y: 1, Z: 1}, Dim3{X: 32, Y: 1, Z: 1}, args...)
			})
		}()
	}
}

func TestUploadF32Rounds(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	d := r.d
	x := []float32{1, 1.00390625, float32(math.Inf(1)), 3.14159}
	for _, dt := range []device.DType{device.F32, device.BF16, device.F16} {
		m, _ := d.Alloc(int64(len(x)*dt.Size()), d.aux)
		if err := d.UploadF32(m, dt, x); err != nil {
			t.Fatal(err)
		}
		got, err := d.DownloadF32(m, dt, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if want := roundTo(dt, x[i]); got[i] != want {
				t.Errorf("%v[%d] = %v, want %v", dt, i, got[i], want)
			}
		}
	}
}

// TestGemmOnUnalignedViews: a view at an 8-byte offset gets an algorithm
// chosen for its alignment (cuBLASLt rejects pointers less aligned than
// its algorithm assumed; so does the fake).
func TestGemmOnUnalignedViews(t *testing.T) {
	r := openFake(t, fakecu.Options{}, Config{})
	h := newHarness(t, r.d)
	const M, N, K = 4, 3, 5
	A, B := randn(1, M*K+2, 1), randn(2, K*N, 1)
	ma, mb, mc := h.in(device.F32, A), h.in(device.F32, B), h.zeros(device.F32, M*N+2)
	g := Gemm{M: M, N: N, K: K, AType: device.F32, BType: device.F32, CType: device.F32}
	h.do(func(q *Issuer) error {
		if err := q.Gemm(h.s, g, 1, ma.Slice(0, 4*M*K), mb, 0, mc.Slice(0, 4*M*N)); err != nil {
			return err
		}
		return q.Gemm(h.s, g, 1, ma.Slice(8, 4*M*K), mb, 0, mc.Slice(8, 4*M*N))
	})
	got := h.out(device.F32, mc)[2:]
	want := cpuGemm(A[2:], B, M, N, K)
	output{"gemm on views", device.F32, got, want, 1e-6}.check(t, "")
	if n := r.d.GemmPlans(); n != 2 {
		t.Errorf("%d GEMM plans, want one per alignment", n)
	}
}
