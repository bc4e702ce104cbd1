package nccl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/cuda"
	"github.com/dszero/dszero/device"
)

// The TestGPU* tests run the backend on the real NCCL and a real GPU, at
// world 1 (one GPU cannot hold two NCCL ranks), and skip without them.
// scripts/gpu/run.sh runs them on the GPU machine from a test binary that
// scripts/gpu/build.sh builds. DSZERO_CUDA_LIB_DIR adds library folders
// (like --cuda-lib-dir).

func libDirs() []string {
	if d := os.Getenv("DSZERO_CUDA_LIB_DIR"); d != "" {
		return filepath.SplitList(d)
	}
	return nil
}

// gpuWorld is a one-rank world on the real NCCL and GPU 0.
func gpuWorld(t *testing.T) (*nccl.World, *cuda.Device) {
	t.Helper()
	if os.Getenv("DSZERO_GPU_TESTS") == "0" {
		t.Skip("DSZERO_GPU_TESTS=0")
	}
	l, err := nccl.Load(libDirs()...)
	if errors.Is(err, nccl.ErrNoNCCL) {
		t.Skipf("no NCCL: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := cuda.Open(cuda.Config{LibDirs: libDirs(), CacheDir: "off"})
	if errors.Is(err, cuda.ErrNoCUDA) {
		t.Skipf("no GPU: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if err != nil {
		t.Fatalf("CUDA is installed but the device does not open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	t.Logf("NCCL %d from %s on %v", l.Lib.Version(), l.Path, d)
	id, err := l.Lib.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	w, err := nccl.NewWorld(context.Background(), nccl.Options{Lib: l.Lib, Device: nccl.NewCUDADevice(d), Rank: 0, Size: 1, ID: id, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w, d
}

// The conformance suite through the host path (staged through pinned
// and device memory), and a split.
func TestGPUNCCLConformanceWorld1(t *testing.T) {
	w, _ := gpuWorld(t)
	ctx := context.Background()
	if err := commtest.Check(ctx, w.Comm(), commtest.Cases(1)); err != nil {
		t.Fatal(err)
	}
	sub, err := w.Comm().Split(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := commtest.Check(ctx, sub, commtest.Cases(1)[:20]); err != nil {
		t.Fatalf("split communicator: %v", err)
	}
	if none, err := w.Comm().Split(ctx, comm.NoColor, 0); err != nil || none != nil {
		t.Fatalf("Split(NoColor) = %v, %v; want nil, nil", none, err)
	}
}

// A group of collectives on device memory, with PreMulSum, ordered after
// an event of another stream.
func TestGPUNCCLGroupOnDeviceMemory(t *testing.T) {
	w, d := gpuWorld(t)
	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) - 300.5
	}
	bytes := func(v []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, err := d.Alloc(4*n, s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(4*n, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(a, bytes(x)); err != nil {
		t.Fatal(err)
	}
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	if err := d.Do(func(q *cuda.Issuer) error { return q.Record(ev, s) }); err != nil {
		t.Fatal(err)
	}
	g := w.Comm().Group(context.Background(), nccl.EventMarker(ev),
		nccl.DeviceOp{Kind: comm.KindAllReduce, DType: device.F32, Send: a.Ptr(), Recv: a.Ptr(), Count: n, Op: comm.PreAvg},
		nccl.DeviceOp{Kind: comm.KindAllGather, DType: device.F32, Send: a.Ptr(), Recv: b.Ptr(), Count: n})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := d.Download(bytes(got), b, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, x) {
		t.Errorf("all_gather after a pre-averaged all_reduce at world 1 changed the data: %v…, want %v…", got[:4], x[:4])
	}
	d.Free(a, s)
	d.Free(b, s)
}
