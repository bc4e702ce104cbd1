package nccl_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
)

// addr is a host slice's address as a device pointer: the fake device
// addresses host memory.
func addr(x []float32) driver.DevicePtr {
	return driver.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(x))))
}

// A ZeRO-3 style prefetch: several all-gathers of one layer's parameter
// shards issued as one NCCL group, plus an in-place one, and the traffic
// each adds.
func TestGroupOfDeviceCollectives(t *testing.T) {
	const n = 3
	j := &job{n: n, timeout: time.Minute}
	sizes := []int{5, 1, 8}
	noErrors(t, j.run(t, func(w *nccl.World) error {
		c, r := w.Comm(), w.Rank()
		var ops []nccl.DeviceOp
		var ins, outs [][]float32 // referenced until Wait: the ops hold only addresses
		for i, m := range sizes {
			in := make([]float32, m)
			for k := range in {
				in[k] = float32(100*i + 10*r + k)
			}
			out := make([]float32, n*m)
			ins, outs = append(ins, in), append(outs, out)
			ops = append(ops, nccl.DeviceOp{Kind: comm.KindAllGather, DType: device.F32, Send: addr(in), Recv: addr(out), Count: m})
		}
		// In place: the chunk is rank r's part of the output.
		whole := make([]float32, n*2)
		whole[2*r], whole[2*r+1] = float32(r), float32(-r)
		ops = append(ops, nccl.DeviceOp{Kind: comm.KindAllGather, DType: device.F32, Send: addr(whole[2*r:]), Recv: addr(whole), Count: 2})
		before := c.Traffic()
		g := c.Group(context.Background(), nil, ops...)
		err := g.Wait()
		runtime.KeepAlive(ins)
		if err != nil {
			return err
		}
		m, err := g.Issued()
		if err != nil {
			return err
		}
		if done, _ := m.Done(); !done {
			return fmt.Errorf("the group's marker is not done after Wait")
		}
		m.Release()
		for i, m := range sizes {
			var want []float32
			for q := range n {
				for k := range m {
					want = append(want, float32(100*i+10*q+k))
				}
			}
			if d := cmp.Diff(want, outs[i]); d != "" {
				return fmt.Errorf("all_gather %d (-want +got):\n%s", i, d)
			}
		}
		if want := []float32{0, 0, 1, -1, 2, -2}; !slices.Equal(whole, want) {
			return fmt.Errorf("in-place all_gather = %v, want %v", whole, want)
		}
		got := c.Traffic().Of(comm.KindAllGather).Calls - before.Of(comm.KindAllGather).Calls
		if got != int64(len(ops)) {
			return fmt.Errorf("traffic counts %d all_gathers, want %d", got, len(ops))
		}
		wantBytes := int64(4 * n * (5 + 1 + 8 + 2))
		if b := c.Traffic().Of(comm.KindAllGather).Bytes - before.Of(comm.KindAllGather).Bytes; b != wantBytes {
			return fmt.Errorf("traffic counts %d bytes, want %d", b, wantBytes)
		}
		// The next collective is numbered after the group's four.
		if err := c.Barrier(context.Background()).Wait(); err != nil {
			return err
		}
		return nil
	}))
	calls := j.net.Calls()
	if calls["ncclGroupStart"] != n || calls["ncclGroupEnd"] != n || calls["ncclAllGather"] != 4*n {
		t.Errorf("NCCL calls %v: want one group of 4 all_gathers per rank", calls)
	}
}
