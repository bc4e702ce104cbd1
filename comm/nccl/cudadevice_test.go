package nccl

import (
	"slices"
	"testing"
	"time"

	"github.com/dszero/dszero/cuda"
	"github.com/dszero/dszero/cuda/fakecu"
)

// The CUDA side of the backend — streams, event markers, staging host
// buffers through pinned and device memory — on the fake CUDA driver.
func TestCUDADeviceStagesThroughDeviceMemory(t *testing.T) {
	drv := fakecu.New(fakecu.Options{})
	d, err := cuda.OpenWith(cuda.Libs{Driver: drv, NVRTC: fakecu.NewNVRTC(), BlasLt: fakecu.NewBlasLt(drv), Info: "fakecu"}, cuda.Config{CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g := NewCUDADevice(d)
	st, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Destroy()
	if st.Handle() == 0 {
		t.Fatal("the stream has no CUstream")
	}
	orig := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	host := slices.Clone(orig)
	sg, err := st.Stage(host, true)
	if err != nil {
		t.Fatal(err)
	}
	if sg.Ptr() == 0 {
		t.Fatal("staged memory has no device address")
	}
	clear(host) // the device holds its own copy now
	if err := sg.Return(2, 5); err != nil {
		t.Fatal(err)
	}
	m, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, m)
	m.Release()
	if err := sg.Finish(true); err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 0, 3, 4, 5, 6, 7, 0, 0, 0}; !slices.Equal(host, want) {
		t.Errorf("host after the return of bytes [2, 7) = %v, want %v", host, want)
	}

	// A failed collective's staging gives nothing back.
	sg, err = st.Stage(host, true)
	if err != nil {
		t.Fatal(err)
	}
	sg.Return(0, len(host))
	m, _ = st.Record()
	waitDone(t, m)
	copy(host, orig)
	if err := sg.Finish(false); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(host, orig) {
		t.Errorf("Finish(false) wrote the host buffer: %v", host)
	}
	if live, _ := drv.Live(0); live != 0 {
		t.Errorf("%d bytes of device memory still allocated after Finish", live)
	}

	// Ordering after another stream's marker.
	other, _ := g.NewStream()
	defer other.Destroy()
	m2, _ := other.Record()
	if err := st.After(m2); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func waitDone(t *testing.T, m Marker) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := m.Done()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the marker never completed")
		}
		time.Sleep(time.Millisecond)
	}
}
