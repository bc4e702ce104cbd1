package comm_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
)

// TestReduceMatchesReference: the blocked kernel equals the serial
// per-element definition bit for bit, at lengths around the block size,
// with separate destinations and in place (every dst is its src).
func TestReduceMatchesReference(t *testing.T) {
	for _, dt := range []device.DType{device.F32, device.F16, device.BF16} {
		for _, op := range []comm.Op{comm.Sum, comm.Avg, comm.PreAvg} {
			for nsrc := 1; nsrc <= 5; nsrc++ {
				for _, n := range []int{0, 1, 1023, 1024, 1025, 3001} {
					name := fmt.Sprintf("%v/%v/srcs=%d/len=%d", dt, op, nsrc, n)
					tc := commtest.Case{DType: dt, Seed: uint64(n*10 + nsrc)}
					vals := make([][]float32, nsrc)
					srcs := make([]comm.Buffer, nsrc)
					for k := range vals {
						vals[k] = commtest.Values(tc, k, n)
						srcs[k] = commtest.Encode(dt, vals[k])
					}
					want := make([]uint32, n)
					col := make([]float32, nsrc)
					for i := range want {
						for k := range vals {
							col[k] = vals[k][i]
						}
						want[i] = commtest.Reference(dt, op, col)
					}
					out := commtest.Encode(dt, make([]float32, n))
					other := commtest.Encode(dt, make([]float32, n))
					comm.Reduce([]comm.Buffer{out, other}, srcs, op)
					for _, got := range []comm.Buffer{out, other} {
						if g := commtest.Bits(got); !slices.Equal(want, g) {
							t.Fatalf("%s: (-want +got):\n%s", name, cmp.Diff(want, g))
						}
					}
					comm.Reduce(srcs, srcs, op) // in place, as the in-process all_reduce does
					for k, got := range srcs {
						if g := commtest.Bits(got); !slices.Equal(want, g) {
							t.Fatalf("%s in place, src %d: (-want +got):\n%s", name, k, cmp.Diff(want, g))
						}
					}
				}
			}
		}
	}
}

// TestReduce16RoundsEachAdd pins the documented 16-bit rule: add in
// rank order, rounding to the dtype after every addition, as gloo's and
// NCCL's 16-bit sums do. In bf16 (8 significant bits) 1 + 2^-8 is a tie
// and rounds back to 1 (to even), so 1 + 2^-8 + 2^-8 loses both small
// terms, where one rounding at the end would keep their sum 2^-7; in rank
// order 2^-8 + 2^-8 + 1 keeps it. For two ranks it is one correctly
// rounded sum, and Avg divides the rounded sum once.
func TestReduce16RoundsEachAdd(t *testing.T) {
	small := float32(math.Ldexp(1, -8))
	bf := func(vs ...float32) (bs []comm.Buffer) {
		for _, v := range vs {
			bs = append(bs, comm.BF16([]uint16{half.BF16FromF32(v)}))
		}
		return bs
	}
	for _, tc := range []struct {
		srcs []float32
		op   comm.Op
		want float32
	}{
		{[]float32{1, small, small}, comm.Sum, 1},
		{[]float32{small, small, 1}, comm.Sum, 1 + 2*small},
		{[]float32{1, small}, comm.Sum, 1},
		{[]float32{1, 3 * small}, comm.Sum, 1 + 4*small},
		{[]float32{small, small, 1}, comm.Avg, half.NearestBF16((1 + 2*small) / 3)},
	} {
		out := comm.BF16(make([]uint16, 1))
		comm.Reduce([]comm.Buffer{out}, bf(tc.srcs...), tc.op)
		if got := half.F32FromBF16(out.Bits()[0]); got != tc.want {
			t.Errorf("bf16 %v of %v = %v, want %v", tc.op, tc.srcs, got, tc.want)
		}
	}
	// fp16 (11 significant bits): 1 + 2^-11 is a tie, rounded to 1 at
	// every add.
	tiny := float32(math.Ldexp(1, -11))
	out := comm.F16(make([]uint16, 1))
	comm.Reduce([]comm.Buffer{out}, []comm.Buffer{comm.F16([]uint16{half.F16FromF32(1)}), comm.F16([]uint16{half.F16FromF32(tiny)}),
		comm.F16([]uint16{half.F16FromF32(tiny)})}, comm.Sum)
	if got := half.F32FromF16(out.Bits()[0]); got != 1 {
		t.Errorf("fp16 1 + 2^-11 + 2^-11 = %v, want 1", got)
	}
}

// TestReduceOrder pins the order: rank 0 first. In float32,
// (2^24 + 1) + 1 = 2^24 (each 1 is lost to rounding), while 1 + 1 + 2^24
// would be 2^24 + 2.
func TestReduceOrder(t *testing.T) {
	big := float32(1 << 24)
	out := comm.F32(make([]float32, 1))
	comm.Reduce([]comm.Buffer{out}, []comm.Buffer{comm.F32([]float32{big}), comm.F32([]float32{1}), comm.F32([]float32{1})}, comm.Sum)
	if got := out.F32()[0]; got != big {
		t.Errorf("2^24 + 1 + 1 = %v, want %v (rank order, float32)", got, big)
	}
	comm.Reduce([]comm.Buffer{out}, []comm.Buffer{comm.F32([]float32{1}), comm.F32([]float32{1}), comm.F32([]float32{big})}, comm.Sum)
	if got := out.F32()[0]; got != big+2 {
		t.Errorf("1 + 1 + 2^24 = %v, want %v", got, big+2)
	}
	// Avg divides once: 0.1+0.2+0.4 in float32, then / 3.
	comm.Reduce([]comm.Buffer{out}, []comm.Buffer{comm.F32([]float32{0.1}), comm.F32([]float32{0.2}), comm.F32([]float32{0.4})}, comm.Avg)
	if got, want := out.F32()[0], (float32(0.1)+float32(0.2)+float32(0.4))/3; got != want {
		t.Errorf("avg = %v, want %v", got, want)
	}
}

// TestPreAvgDividesFirst pins PreAvg's order: each source is divided
// before the sum. Near the top of the float32 range the sum of two
// values overflows where the sum of their halves does not, and with
// three ranks the quotients' sum differs from the sum's quotient in the
// last bit.
func TestPreAvgDividesFirst(t *testing.T) {
	f32 := func(vs ...float32) (bs []comm.Buffer) {
		for _, v := range vs {
			bs = append(bs, comm.F32([]float32{v}))
		}
		return bs
	}
	big := float32(3e38)
	for _, tc := range []struct {
		srcs      []float32
		want, avg float32
	}{
		{[]float32{big, big}, big, float32(math.Inf(1))},
		{[]float32{1, 2, 4}, 0, 0}, // want and avg computed below, in float32 at run time
	} {
		if len(tc.srcs) == 3 {
			n := float32(len(tc.srcs))
			x, y, z := tc.srcs[0], tc.srcs[1], tc.srcs[2]
			tc.want, tc.avg = x/n+y/n+z/n, (x+y+z)/n
		}
		if tc.want == tc.avg {
			t.Fatalf("%v: PreAvg and Avg agree (%v); the case does not tell them apart", tc.srcs, tc.want)
		}
		out := comm.F32(make([]float32, 1))
		srcs := f32(tc.srcs...)
		comm.Reduce([]comm.Buffer{out}, srcs, comm.PreAvg)
		if got := out.F32()[0]; got != tc.want {
			t.Errorf("pre_avg of %v = %v, want %v", tc.srcs, got, tc.want)
		}
		for k, b := range srcs {
			if b.F32()[0] != tc.srcs[k] {
				t.Errorf("pre_avg changed source %d: %v, want %v", k, b.F32()[0], tc.srcs[k])
			}
		}
	}
}

func TestReducePanicsOnMisuse(t *testing.T) {
	for name, f := range map[string]func(){
		"no sources": func() { comm.Reduce(nil, nil, comm.Sum) },
		"lengths": func() {
			comm.Reduce(nil, []comm.Buffer{comm.F32(make([]float32, 2)), comm.F32(make([]float32, 3))}, comm.Sum)
		},
		"dtypes": func() {
			comm.Reduce([]comm.Buffer{comm.BF16(make([]uint16, 2))}, []comm.Buffer{comm.F16(make([]uint16, 2))}, comm.Sum)
		},
		"op": func() { comm.Reduce(nil, []comm.Buffer{comm.F32(nil)}, comm.Op(9)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestBufferViews(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	b := comm.F32(x).Slice(1, 3)
	if b.Len() != 2 || b.Bytes() != 8 || b.F32()[0] != 2 || b.String() != "fp32[2]" {
		t.Errorf("slice view: %v %v", b, b.F32())
	}
	b.F32()[0] = 20
	if x[1] != 20 {
		t.Error("a Buffer must be a view, not a copy")
	}
	h := comm.BF16(make([]uint16, 6))
	if h.Bytes() != 12 || h.DType() != device.BF16 {
		t.Errorf("bf16 buffer: %v, %d bytes", h, h.Bytes())
	}
	engine, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	cpu := device.NewCPU(mem.NewAccountant(0), engine)
	db, err := cpu.Alloc(mem.Grads, mem.Device, device.F16, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Free(db)
	if v := comm.Of(db); v.DType() != device.F16 || v.Len() != 5 || &v.Bits()[0] != &db.Bits()[0] {
		t.Errorf("Of(device buffer) = %v, not a view of it", v)
	}
}

func TestNominalTraffic(t *testing.T) {
	tests := []struct {
		kind       comm.Kind
		n, rank    int
		root       int
		b          int64
		sent, recv int64
	}{
		{comm.KindAllReduce, 4, 0, 0, 400, 600, 600},
		{comm.KindAllReduce, 1, 0, 0, 400, 0, 0},
		{comm.KindReduceScatter, 4, 1, 0, 400, 300, 300},
		{comm.KindAllGather, 2, 1, 0, 400, 200, 200},
		{comm.KindBroadcast, 3, 2, 2, 400, 400, 0},
		{comm.KindBroadcast, 3, 0, 2, 400, 0, 400},
		{comm.KindBarrier, 3, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		s, r := comm.NominalTraffic(tt.kind, tt.n, tt.rank, tt.root, tt.b)
		if s != tt.sent || r != tt.recv {
			t.Errorf("%v n=%d rank=%d: sent %d received %d, want %d %d", tt.kind, tt.n, tt.rank, s, r, tt.sent, tt.recv)
		}
	}
	var tr comm.Traffic
	tr.Record(comm.KindAllReduce, comm.Counts{Calls: 1, Bytes: 8, Sent: 12, Received: 12})
	tr.Record(comm.KindAllGather, comm.Counts{Calls: 2, Bytes: 4, Sent: 2, Received: 2})
	if d := cmp.Diff(comm.Counts{Calls: 3, Bytes: 12, Sent: 14, Received: 14}, tr.Total()); d != "" {
		t.Errorf("Total (-want +got):\n%s", d)
	}
}

// BenchmarkReduce is the in-process all_reduce kernel on one rank's share:
// n sources reduced in place into all n (dsts = srcs), 4 MiB each. SetBytes
// counts what the kernel reads and writes.
func BenchmarkReduce(b *testing.B) {
	for _, tc := range []struct {
		op comm.Op
		n  int
	}{{comm.Avg, 2}, {comm.Avg, 4}, {comm.PreAvg, 2}, {comm.PreAvg, 4}} {
		op, n := tc.op, tc.n
		b.Run(fmt.Sprintf("fp32/%v/srcs=%d", op, n), func(b *testing.B) {
			bufs := make([]comm.Buffer, n)
			for k := range bufs {
				x := make([]float32, 1<<20)
				for i := range x {
					x[i] = 1
				}
				bufs[k] = comm.F32(x)
			}
			b.SetBytes(2 * int64(n) * bufs[0].Bytes())
			for b.Loop() {
				comm.Reduce(bufs, bufs, op) // every element stays 1
			}
		})
	}
}

// TestCopy: Copy moves bits like the built-in copy (NaN payloads included)
// and refuses to copy across dtypes.
func TestCopy(t *testing.T) {
	nan := math.Float32frombits(0x7FA00001)
	dst := make([]float32, 2)
	if n := comm.Copy(comm.F32(dst), comm.F32([]float32{1, nan, 3})); n != 2 {
		t.Errorf("Copy returned %d, want 2", n)
	}
	if math.Float32bits(dst[0]) != math.Float32bits(1) || math.Float32bits(dst[1]) != 0x7FA00001 {
		t.Errorf("Copy wrote %#08x %#08x", math.Float32bits(dst[0]), math.Float32bits(dst[1]))
	}
	bits := make([]uint16, 3)
	if n := comm.Copy(comm.BF16(bits), comm.BF16([]uint16{0x7FC1, 0x8000})); n != 2 || !slices.Equal(bits, []uint16{0x7FC1, 0x8000, 0}) {
		t.Errorf("Copy of bf16: %d, %#04x", n, bits)
	}
	defer func() {
		if recover() == nil {
			t.Error("Copy of fp16 into bf16 did not panic")
		}
	}()
	comm.Copy(comm.BF16(bits), comm.F16(bits))
}
