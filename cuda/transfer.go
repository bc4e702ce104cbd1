package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// Upload copies data into dst (len(data) == dst.Len()) and waits for the
// copy: a staging pinned buffer on the device's own stream. For setup and
// tests; the step path uses CopyToDevice on pinned buffers it keeps.
func (d *Device) Upload(dst Mem, data []byte) error {
	if int64(len(data)) != dst.n {
		panic(fmt.Sprintf("cuda: Upload of %d bytes into %v", len(data), dst))
	}
	if dst.n == 0 {
		return nil
	}
	var h *HostBuffer
	err := d.Do(func(q *Issuer) (err error) {
		if h, err = q.AllocHost(dst.n); err != nil {
			return err
		}
		copy(h.Bytes(), data)
		if err := q.CopyToDevice(d.aux, dst, h, 0); err != nil {
			return err
		}
		return q.FreeHost(h, d.aux)
	})
	if err != nil {
		return err
	}
	return d.aux.Synchronize()
}

// Download copies src into data (len(data) == src.Len()) after the work
// already queued on after (nil: none) has completed, and waits for it.
func (d *Device) Download(data []byte, src Mem, after *Stream) error {
	if int64(len(data)) != src.n {
		panic(fmt.Sprintf("cuda: Download of %v into %d bytes", src, len(data)))
	}
	if src.n == 0 {
		return nil
	}
	var h *HostBuffer
	var ev *Event
	if after != nil {
		var err error
		if ev, err = d.NewEvent(); err != nil {
			return err
		}
		defer ev.Destroy()
	}
	err := d.Do(func(q *Issuer) (err error) {
		if ev != nil {
			if err := q.Record(ev, after); err != nil {
				return err
			}
			if err := q.WaitEvent(d.aux, ev); err != nil {
				return err
			}
		}
		if h, err = q.AllocHost(src.n); err != nil {
			return err
		}
		return q.CopyToHost(d.aux, h, 0, src)
	})
	if err != nil {
		return err
	}
	if err := d.aux.Synchronize(); err != nil {
		return err
	}
	copy(data, h.Bytes())
	return d.FreeHost(h, nil)
}

// UploadF32 stores x into dst as dtype dt (rounded to nearest even for the
// 16-bit types, as package half rounds).
func (d *Device) UploadF32(dst Mem, dt device.DType, x []float32) error {
	if dt == device.F32 {
		return d.Upload(dst, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)))
	}
	b := make([]uint16, len(x))
	if dt == device.BF16 {
		half.F32ToBF16(b, x)
	} else {
		half.F32ToF16(b, x)
	}
	return d.Upload(dst, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 2*len(b)))
}

// DownloadF32 reads src, of dtype dt, widened to float32.
func (d *Device) DownloadF32(src Mem, dt device.DType, after *Stream) ([]float32, error) {
	n := src.n / int64(dt.Size())
	out := make([]float32, n)
	if dt == device.F32 {
		err := d.Download(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*n), src, after)
		return out, err
	}
	b := make([]uint16, n)
	if err := d.Download(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 2*n), src, after); err != nil {
		return nil, err
	}
	if dt == device.BF16 {
		half.BF16ToF32(out, b)
	} else {
		half.F16ToF32(out, b)
	}
	return out, nil
}
