package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/cuda/fakecu"
	"github.com/dszero/dszero/device"
)

// The TestGPU* tests run on a real GPU and skip without one (no driver,
// no device, or DSZERO_GPU_TESTS=0). scripts/gpu/run.sh runs them on the
// GPU machine from a binary built here. DSZERO_CUDA_LIB_DIR adds library
// folders (like --cuda-lib-dir), DSZERO_CUDA_CACHE keeps the compiled
// kernels somewhere that outlives the test.

func gpuConfig(t *testing.T) Config {
	cfg := Config{CacheDir: os.Getenv("DSZERO_CUDA_CACHE")}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	if dirs := os.Getenv("DSZERO_CUDA_LIB_DIR"); dirs != "" {
		cfg.LibDirs = filepath.SplitList(dirs)
	}
	return cfg
}

// gpu opens the GPU, or skips the test when there is none.
func gpu(t *testing.T) *Device {
	t.Helper()
	if os.Getenv("DSZERO_GPU_TESTS") == "0" {
		t.Skip("DSZERO_GPU_TESTS=0")
	}
	d, err := Open(gpuConfig(t))
	if errors.Is(err, ErrNoCUDA) {
		msg := err.Error()
		if i := strings.IndexByte(msg, '\n'); i > 0 {
			msg = msg[:i]
		}
		t.Skipf("no GPU: %s", msg)
	}
	if err != nil {
		t.Fatalf("CUDA is installed but the device does not open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil && d.Failed() == nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func TestGPUDevice(t *testing.T) {
	d := gpu(t)
	t.Logf("%v\nlibraries: %s", d, d.LibInfo())
	st, err := d.MemStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != d.TotalMemory() || st.Free == 0 || st.Free > st.Total {
		t.Errorf("MemStats = %+v, total memory %d", st, d.TotalMemory())
	}
}

func TestGPUMemcpyRoundTrip(t *testing.T) {
	d := gpu(t)
	const n = 64 << 20
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			src[i+j] = byte(v >> (8 * j))
		}
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, err := d.Alloc(n, s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(n, s)
	if err != nil {
		t.Fatal(err)
	}
	s.Synchronize()
	start := time.Now()
	if err := d.Upload(a, src); err != nil {
		t.Fatal(err)
	}
	up := time.Since(start)
	var h *HostBuffer
	err = d.Do(func(q *Issuer) (err error) {
		if err := q.Copy(s, b, a); err != nil {
			return err
		}
		if err := q.Memset8(s, a.Slice(0, 4096), 0xAB); err != nil {
			return err
		}
		if h, err = q.AllocHost(n); err != nil {
			return err
		}
		return q.CopyToHost(s, h, 0, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := h.Bytes()
	for i := range got {
		if got[i] != src[i] {
			t.Fatalf("byte %d = %#x after upload, device copy and pinned download, want %#x", i, got[i], src[i])
		}
	}
	head := make([]byte, 4096)
	if err := d.Download(head, a.Slice(0, 4096), s); err != nil {
		t.Fatal(err)
	}
	for i, v := range head {
		if v != 0xAB {
			t.Fatalf("memset byte %d = %#x", i, v)
		}
	}
	t.Logf("64 MiB upload (pageable source through a pinned stage) %v", up)
	d.Do(func(q *Issuer) error {
		q.FreeHost(h, s)
		q.Free(a, s)
		return q.Free(b, s)
	})
}

// TestGPUKernelsBuild compiles the kernels with NVRTC for this GPU and
// resolves every one of them in the loaded module.
func TestGPUKernelsBuild(t *testing.T) {
	d := gpu(t)
	k, err := d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sm_%d, NVRTC %d.%d, %v, cache hit %v (%s), cache error %v", k.Info.Arch, k.Info.NVRTC[0], k.Info.NVRTC[1],
		k.Info.Duration, k.Info.CacheHit, k.Info.CachePath, k.Info.CacheError)
	if k.Info.Log != "" {
		t.Logf("NVRTC log:\n%s", k.Info.Log)
	}
	err = d.Do(func(q *Issuer) error {
		for _, s := range k.Table().Specs() {
			if _, err := k.function(q, s.Name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUConformance runs every conformance case on the GPU and on the
// fake driver (the Go reference kernels) with the same inputs: each GPU
// output must meet the float64 expectation, and equal the reference bit
// for bit unless the case is approximate (CUDA's transcendentals, GEMM
// accumulation order), where it must be within a few ulps of it.
func TestGPUConformance(t *testing.T) {
	d := gpu(t)
	fake := openFake(t, fakecu.Options{Major: d.major, Minor: d.minor, SMs: d.sms, Memory: 4 << 30}, Config{})
	hg, hf := newHarness(t, d), newHarness(t, fake.d)
	for _, c := range confCases() {
		for _, dt := range c.dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				hg.t, hf.t = t, t
				got, ref := c.run(hg, dt), c.run(hf, dt)
				for i, o := range got {
					o.check(t, "GPU ")
					compareWithReference(t, o, ref[i], c.approx)
				}
			})
		}
	}
}

// compareWithReference logs, for run.sh's summary, and checks a GPU output
// against the reference's.
func compareWithReference(t *testing.T, g, r output, approx bool) {
	t.Helper()
	gb, rb := bitsOf(g.dt, g.got), bitsOf(r.dt, r.got)
	differ, worst := 0, 0.0
	for i := range gb {
		if gb[i] == rb[i] {
			continue
		}
		differ++
		a, b := float64(g.got[i]), float64(r.got[i])
		if u := math.Abs(a-b) / (math.Max(math.Abs(b), 1e-30) * ulp(g.dt)); u > worst || math.IsNaN(u) {
			worst = u
		}
	}
	t.Logf("GPUCMP %s %v: %d of %d differ from the reference, worst %.1f ulp (approx %v)", g.name, g.dt, differ, len(gb), worst, approx)
	switch {
	case !approx && differ > 0:
		t.Errorf("%s: %d of %d values differ from the Go reference (worst %.1f ulp); this kernel must match it bit for bit", g.name, differ, len(gb), worst)
	case approx && worst > 64 && g.dt == device.F32:
		t.Errorf("%s: %.1f ulp from the Go reference", g.name, worst)
	}
}

// TestGPUGemmNoTF32 multiplies fp32 matrices big enough for tensor-core
// kernels and checks the error against float64 is float32's, not TF32's
// (10-bit mantissa, relative error ~1e-3).
func TestGPUGemmNoTF32(t *testing.T) {
	d := gpu(t)
	h := newHarness(t, d)
	const M, N, K = 512, 2304, 768
	A, B := randn(200, M*K, 1), randn(201, K*N, 1)
	ma, mb, mc := h.in(device.F32, A), h.in(device.F32, B), h.zeros(device.F32, M*N)
	g := Gemm{M: M, N: N, K: K, AType: device.F32, BType: device.F32, CType: device.F32}
	h.do(func(q *Issuer) error { return q.Gemm(h.s, g, 1, ma, mb, 0, mc) })
	got := h.out(device.F32, mc)
	want := cpuGemm(A, B, M, N, K)
	var worst float64
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i])-want[i])/math.Sqrt(K))
	}
	t.Logf("fp32 GEMM %dx%dx%d: worst error %.3g per sqrt(K) (TF32 would be ~1e-3)", M, N, K, worst)
	if worst > 2e-5 {
		t.Errorf("fp32 GEMM error %.3g: TF32 or worse", worst)
	}
	for _, dt := range []device.DType{device.BF16, device.F16} {
		A16, B16 := rounded(dt, A), rounded(dt, B)
		ma, mb, mc := h.in(dt, A16), h.in(dt, B16), h.zeros(dt, M*N)
		g := Gemm{M: M, N: N, K: K, AType: dt, BType: dt, CType: dt}
		h.do(func(q *Issuer) error { return q.Gemm(h.s, g, 1, ma, mb, 0, mc) })
		got := h.out(dt, mc)
		want := cpuGemm(A16, B16, M, N, K)
		bad := 0
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 2*ulp(dt)*math.Abs(want[i])+1e-5*math.Sqrt(K) {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%v GEMM: %d of %d results beyond one rounding of the float64 product (fp32 accumulation expected)", dt, bad, len(got))
		}
	}
	t.Logf("GEMM plans cached: %d", d.GemmPlans())
}

// cpuGemm is a row-major float64 product, in parallel.
func cpuGemm(A, B []float32, M, N, K int) []float64 {
	C := make([]float64, M*N)
	var wg sync.WaitGroup
	rows := (M + runtime.NumCPU() - 1) / runtime.NumCPU()
	for lo := 0; lo < M; lo += rows {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				for p := range K {
					a := float64(A[i*K+p])
					row := C[i*N : (i+1)*N]
					for j, b := range B[p*N : (p+1)*N] {
						row[j] += a * float64(b)
					}
				}
			}
		}(lo, min(M, lo+rows))
	}
	wg.Wait()
	return C
}

// TestGPUFaultFailsDevice runs a kernel that reads past its allocation
// in a child process (the fault poisons the context for the whole
// process) and expects a *DeviceFailedError there.
func TestGPUFaultFailsDevice(t *testing.T) {
	if os.Getenv("DSZERO_GPU_FAULT_CHILD") == "1" {
		d := gpu(t)
		m, err := d.Alloc(256, d.aux)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Do(func(q *Issuer) error {
			return q.Launch(d.aux, "scale_f32", Dim3{X: 64, Y: 1, Z: 1}, Dim3{X: 256, Y: 1, Z: 1}, P(m), I64(1<<30), F32(2))
		})
		if err == nil {
			err = d.aux.Synchronize()
		}
		var fe *DeviceFailedError
		if !errors.As(err, &fe) {
			t.Fatalf("faulting kernel: %v, want *DeviceFailedError", err)
		}
		t.Logf("CHILD-OK %v", err)
		return
	}
	gpu(t) // skip without a GPU
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestGPUFaultFailsDevice$", "-test.v")
	cmd.Env = append(os.Environ(), "DSZERO_GPU_FAULT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") {
		t.Errorf("child: %v\n%s", err, out)
	}
}
