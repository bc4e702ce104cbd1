package zcore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// TestDeepSpeedGradDTypes: DeepSpeed 0.14.5's dtypes by stage and config.
func TestDeepSpeedGradDTypes(t *testing.T) {
	const F32, F16, BF16 = device.F32, device.F16, device.BF16
	for _, tc := range []struct {
		stage               int
		model               device.DType
		accum, comm         string
		wModel, wAcc, wComm device.DType
	}{
		{0, F32, "", "", F32, F32, F32},
		{0, BF16, "", "", BF16, F32, BF16}, // BF16_Optimizer: fp32 gradients, bf16 all-reduce
		{1, BF16, "", "", BF16, BF16, BF16},
		{2, BF16, "", "", BF16, BF16, BF16},
		{0, F16, "", "", F16, F16, F16},
		{1, F16, "", "", F16, F16, F16},
		{1, BF16, "fp32", "", BF16, F32, BF16},
		{2, BF16, "fp32", "", BF16, BF16, BF16}, // stage 2 accumulates views of the bf16 gradients
		{0, F16, "fp32", "", F16, F16, F16},     // FP16_Optimizer accumulates in the fp16 .grad
		{0, BF16, "bf16", "fp32", BF16, BF16, F32},
		{2, F32, "", "bf16", F32, F32, BF16},
		{1, 0, "", "", F32, F32, F32}, // a hand-built plan's zero value
	} {
		got, err := DeepSpeedGradDTypes(tc.stage, tc.model, tc.accum, tc.comm)
		if err != nil {
			t.Errorf("stage %d, model %v: %v", tc.stage, tc.model, err)
			continue
		}
		if want := (GradDTypes{tc.wModel, tc.wAcc, tc.wComm}); got != want {
			t.Errorf("stage %d, model %v, grad_accum_dtype %q, communication_data_type %q: %+v, want %+v",
				tc.stage, tc.model, tc.accum, tc.comm, got, want)
		}
	}
}

// TestDeepSpeedGradDTypesRefusesUnknown: a hand-built plan's invalid
// dtype or unknown dtype name is an error naming the field it came
// from, not a panic.
func TestDeepSpeedGradDTypesRefusesUnknown(t *testing.T) {
	for _, tc := range []struct {
		model              device.DType
		accum, comm, field string
	}{
		{device.DType(7), "", "", "training dtype"},
		{device.BF16, "float32", "", "data_types.grad_accum_dtype"},
		{device.F16, "", "half", "communication_data_type"},
	} {
		_, err := DeepSpeedGradDTypes(2, tc.model, tc.accum, tc.comm)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("model %v, grad_accum_dtype %q, communication_data_type %q: error %v, want one naming %s",
				tc.model, tc.accum, tc.comm, err, tc.field)
		}
	}
}

// rb is the nearest bf16 value.
func rb(x float32) float32 { return half.NearestBF16(x) }

// TestAveraging16 sums three ranks' gradients through each rule, bucket
// dtype and communication dtype over the in-process backend, and compares
// with the sequence DeepSpeed runs, written out by hand: the ZeRO rule
// divides in the bucket's dtype, casts, sums rounding after every add in
// rank order, and copies back into the bucket's dtype; the engine's rule
// casts first and multiplies in the communication dtype.
func TestAveraging16(t *testing.T) {
	in := [][]float32{
		{1, 3.14159, -2.71828e-3, 1 + 1.0/256, 1e-30},
		{1.0 / 256, 1.41421, 5.5e-3, 1.0 / 256, -7},
		{1.0 / 256, -0.33333, 1e3, 1.0 / 128, 2.5},
	}
	third := float32(1.0 / 3)
	for _, tc := range []struct {
		name   string
		a      Averaging
		want   func(x [3]float32) float32
		wireDT device.DType
		fuses  bool // the division is left to the reduction (comm.PreAvg)
	}{
		{"zero bf16 bucket, bf16 comm", ZeroAveraging(3).In(device.BF16, device.BF16), func(x [3]float32) float32 {
			h := func(v float32) float32 { return rb(rb(v) / 3) }
			return rb(rb(h(x[0])+h(x[1])) + h(x[2]))
		}, device.BF16, true},
		{"zero bf16 bucket, fp32 comm", ZeroAveraging(3).In(device.BF16, device.F32), func(x [3]float32) float32 {
			h := func(v float32) float32 { return rb(rb(v) / 3) }
			return rb(h(x[0]) + h(x[1]) + h(x[2]))
		}, device.F32, false},
		{"engine fp32 bucket, bf16 comm", EngineAveraging(3, false, 1).In(device.F32, device.BF16), func(x [3]float32) float32 {
			return rb(rb(rb(rb(x[0])+rb(x[1]))+rb(x[2])) * rb(third))
		}, device.BF16, false},
		{"engine prescale, bf16 comm", EngineAveraging(3, true, 1).In(device.F32, device.BF16), func(x [3]float32) float32 {
			h := func(v float32) float32 { return rb(rb(v) * rb(third)) }
			return rb(rb(h(x[0])+h(x[1])) + h(x[2]))
		}, device.BF16, false},
		{"engine fp16 comm", EngineAveraging(3, false, 1).In(device.F16, device.F16), func(x [3]float32) float32 {
			rh := half.NearestF16
			return rh(rh(rh(rh(x[0])+rh(x[1]))+rh(x[2])) * rh(third))
		}, device.F16, false},
		{"fp32 throughout", EngineAveraging(3, false, 1), func(x [3]float32) float32 {
			return (x[0] + x[1] + x[2]) * third
		}, device.F32, false},
		{"zero fp32 throughout", ZeroAveraging(3), func(x [3]float32) float32 {
			return x[0]/3 + x[1]/3 + x[2]/3
		}, device.F32, true},
		{"hybrid: world 6, group 3", GroupAveraging(6, 3), func(x [3]float32) float32 {
			return x[0]/6 + x[1]/6 + x[2]/6
		}, device.F32, false},
	} {
		// Each rule twice: with the reduction over the three ranks, and
		// with Before told the sum is over one rank, so that it does all
		// its arithmetic itself. Both give DeepSpeed's bits.
		for _, fuse := range []bool{true, false} {
			name := fmt.Sprintf("%s, fused %v", tc.name, fuse)
			got := make([][]float32, 3)
			err := inproc.New(3, inproc.Options{}).Run(func(c comm.Comm) error {
				x := slices.Clone(in[c.Rank()])
				size := 1
				if fuse {
					size = c.Size()
				}
				op := tc.a.Before(nil, x, size)
				if wantOp := map[bool]comm.Op{false: comm.Sum, true: comm.PreAvg}[fuse && tc.fuses]; op != wantOp {
					t.Errorf("%s: op %v, want %v", name, op, wantOp)
				}
				w := tc.a.Wire(x)
				if w.DType() != tc.wireDT {
					t.Errorf("%s: wire dtype %v, want %v", name, w.DType(), tc.wireDT)
				}
				if _, err := AllReduceWire(context.Background(), c, w, op, 2, nil); err != nil {
					return err
				}
				tc.a.Unwire(x, 0, len(x))
				tc.a.After(nil, x)
				got[c.Rank()] = x
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range in[0] {
				// Every element is in ring block 0 of its two-element
				// all-reduce (comm.ReduceRing), which adds rank 2's value,
				// then rank 1's, then rank 0's.
				want := tc.want([3]float32{in[2][i], in[1][i], in[0][i]})
				for r := range 3 {
					if math.Float32bits(got[r][i]) != math.Float32bits(want) {
						t.Errorf("%s: rank %d element %d = %v, want %v", name, r, i, got[r][i], want)
					}
				}
			}
		}
	}
}

// TestUnwirePart: a stage widens only its own part of a packed bucket;
// the part's values come back, whatever the offset.
func TestUnwirePart(t *testing.T) {
	a := ZeroAveraging(1).In(device.BF16, device.BF16)
	x := make([]float32, 37)
	for i := range x {
		x[i] = float32(i)*1.37 - 20
	}
	want := slices.Clone(x)
	half.RoundBF16(want)
	a.Wire(x)
	a.Unwire(x, 11, 30)
	if !slices.Equal(x[11:30], want[11:30]) {
		t.Errorf("unwired part %v, want %v", x[11:30], want[11:30])
	}
}

// TestScalarInTorch: torch 1.13's tensor.mul_(1/3) on 16-bit tensors
// (values printed by torch: a = torch.tensor(v, dtype=dt);
// a.clone().mul_(1/3)), which casts the scalar to the tensor's dtype. The
// last column is what a float32 multiplier would give instead.
func TestScalarInTorch(t *testing.T) {
	for _, tc := range []struct {
		dt          device.DType
		in, want    []float32
		f32Multiply []float32 // (a.float()*(1/3)).to(dt): not torch's
	}{
		{device.BF16,
			[]float32{3.0, 100.0, 0.75, 12352.0, -7.5, 0.00150299072265625},
			[]float32{1.0, 33.5, 0.25, 4128.0, -2.5, 0.0005035400390625},
			[]float32{1.0, 33.25, 0.25, 4128.0, -2.5, 0.000499725341796875}},
		{device.F16,
			[]float32{3.0, 100.0, 0.75, 12344.0, -7.5, 0.0015001296997070312},
			[]float32{1.0, 33.3125, 0.25, 4112.0, -2.5, 0.000499725341796875},
			[]float32{1.0, 33.34375, 0.25, 4116.0, -2.5, 0.0005002021789550781}},
	} {
		round := Rounding(tc.dt)
		got := slices.Clone(tc.in)
		s := ScalarIn(tc.dt, float32(1.0/3))
		for i := range got {
			got[i] *= s
		}
		round(got)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v: x·ScalarIn(1/3) differs from torch's mul_ (-torch +got):\n%s", tc.dt, diff)
		}
		if cmp.Equal(tc.want, tc.f32Multiply) {
			t.Errorf("%v: the values do not tell the two multipliers apart", tc.dt)
		}
	}
	if got := ScalarIn(device.F32, float32(1.0/3)); got != float32(1.0/3) {
		t.Errorf("fp32: ScalarIn(1/3) = %v, want float32(1/3)", got)
	}
}
