package ptfile

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLookup(t *testing.T) {
	v, err := Read("testdata/mlp_z2_fp32_zero_pp_rank_1_mp_rank_00_optim_states.pt", dsOpts)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, want string }{
		{"optimizer_state_dict.single_partition_of_fp32_groups[0]", "float32[2884] stride [1] offset 0 storage \"3\""},
		{".optimizer_state_dict.base_optimizer_state.state[0].step", "float32[] stride [] offset 0 storage \"0\""},
		{`optimizer_state_dict.param_slice_mappings[0]["fc3.bias"].numel`, "8"},
		{`optimizer_state_dict.param_slice_mappings[0]["fc3.bias"]`, "deepspeed.utils.tensor_fragment.fragment_address(new)"},
		{"optimizer_state_dict.zero_stage", "deepspeed.runtime.zero.config.ZeroStageEnum.gradients"},
		{"optimizer_state_dict.loss_scaler.cur_scale", "1"},
		{"optimizer_state_dict.base_optimizer_state.param_groups[0].betas[1]", "0.999"},
		{"ds_version", "0.14.5+eb07d41f"},
	}
	for _, c := range cases {
		x, err := Lookup(v, c.path)
		if got := fmt.Sprint(x); err != nil || got != c.want {
			t.Errorf("Lookup %s = %s, %v; want %s", c.path, got, err, c.want)
		}
	}
	for path, want := range map[string]string{
		"optimizer_state_dict.nope":                                `path optimizer_state_dict.nope: dict has no key "nope"`,
		"optimizer_state_dict.partition_count[5]":                  "index 5 out of range (list of 1)",
		"optimizer_state_dict.ds_version[0]":                       "cannot index a str",
		"optimizer_state_dict.partition_count[x]":                  `bad index "x"`,
		`optimizer_state_dict["unclosed`:                           "bad quoted key",
		"optimizer_state_dict..x":                                  "empty name",
		"optimizer_state_dict.loss_scaler.missing":                 "LossScaler has no attribute",
		"optimizer_state_dict.single_partition_of_fp32_groups[0]x": "cannot index a tensor",
	} {
		_, err := Lookup(v, path)
		wantError(t, path, err, want)
	}
	if g, err := Get[*Tensor](v, "optimizer_state_dict.single_partition_of_fp32_groups[0]"); err != nil || !g.RequiresGrad {
		t.Errorf("Get tensor: %v %v", g, err)
	}
	if _, err := Get[*Dict](v, "ds_version"); err == nil {
		t.Error("Get of the wrong type passed")
	}
	// Walk's paths lead back to the values.
	n := 0
	Walk(v, func(path string, x any) error {
		y, err := Lookup(v, path)
		if err != nil || describe(y) != describe(x) {
			t.Errorf("Walk path %q does not lead back: %v", path, err)
		}
		n++
		return nil
	})
	if n < 50 {
		t.Errorf("walked %d values", n)
	}
}

func TestDict(t *testing.T) {
	d := NewOrderedDict()
	d.Set("b", 1)
	d.Set("a", 2)
	d.Set(3, "int")
	d.Set("b", 3) // replaces in place, as Python does
	if got := fmt.Sprint(d.Keys()); got != "[b a 3]" {
		t.Errorf("keys %s", got)
	}
	if x, ok := d.Get("b"); !ok || x != 3 {
		t.Errorf("b = %v", x)
	}
	if x, ok := d.Get(int64(3)); !ok || x != "int" {
		t.Errorf("3 = %v", x)
	}
	if _, ok := d.Get(List{}); ok {
		t.Error("unhashable key found")
	}
	defer func() {
		if recover() == nil {
			t.Error("Set with a list key did not panic")
		}
	}()
	d.Set(List{}, 1)
}

func TestTensorAccess(t *testing.T) {
	x := FromFloat32([]int64{2, 3}, []float32{0, 1, 2, 3, 4, 5})
	tr, err := x.View(0, []int64{3, 2}, []int64{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tr.Float32s()
	if !cmp.Equal(got, []float32{0, 3, 1, 4, 2, 5}) || tr.Contiguous() || !x.Contiguous() {
		t.Errorf("transpose %v", got)
	}
	if _, err := x.View(4, []int64{3}, []int64{1}); err == nil {
		t.Error("a view past the storage passed")
	}
	if _, err := x.View(0, []int64{2}, []int64{-1}); err == nil {
		t.Error("a negative stride passed")
	}
	if _, err := x.View(0, []int64{math.MaxInt64, 2}, []int64{1, 1}); err == nil {
		t.Error("an overflowing size passed")
	}
	if _, err := x.Int64s(); err == nil {
		t.Error("Int64s of float32")
	}

	bits := []uint16{0x3f80, 0xc049, 0x7f80, 0xffc1} // 1, -3.140625, +Inf, a NaN with payload
	bf := FromBits16(BFloat16, []int64{4}, bits)
	if u, _ := bf.Uint16s(); !cmp.Equal(u, bits) {
		t.Errorf("bf16 bits %x", u)
	}
	f, _ := bf.Float32s()
	if f[0] != 1 || f[1] != -3.140625 || !math.IsInf(float64(f[2]), 1) || !math.IsNaN(float64(f[3])) {
		t.Errorf("bf16 widened %v", f)
	}
	h := FromBits16(Float16, []int64{2}, []uint16{0x3c00, 0x0001})
	if f, _ := h.Float32s(); f[0] != 1 || f[1] != float32(math.Ldexp(1, -24)) {
		t.Errorf("fp16 widened %v", f)
	}
	for _, c := range []struct {
		dt   DType
		v    []int64
		want []int64
	}{
		{Int64, []int64{math.MinInt64, 5}, []int64{math.MinInt64, 5}},
		{Int32, []int64{-7, 1 << 33}, []int64{-7, 0}},
		{Int16, []int64{-300}, []int64{-300}},
		{Int8, []int64{-128, 255}, []int64{-128, -1}},
		{Uint8, []int64{255}, []int64{255}},
		{Bool, []int64{0, 7}, []int64{0, 1}},
	} {
		got, err := FromInt64(c.dt, []int64{int64(len(c.v))}, c.v).Int64s()
		if err != nil || !cmp.Equal(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.dt, got, err, c.want)
		}
	}
	s := FromFloat32(nil, []float32{7})
	if b, _ := s.Bytes(); s.Numel() != 1 || len(b) != 4 || fmt.Sprint(s.Stride) != "[]" {
		t.Errorf("scalar %v", s)
	}
	if ArchiveName("/x/mp_rank_00_model_states.pt") != "mp_rank_00_model_states" || ArchiveName("a.b.pt") != "a.b" || ArchiveName(".pt") != "archive" {
		t.Error("ArchiveName")
	}
}

func TestWriterRefuses(t *testing.T) {
	loop := NewDict()
	loop.Set("self", loop)
	unloaded := &Tensor{DType: Float32, Shape: []int64{1}, Stride: []int64{1}, Storage: &Storage{DType: Float32, Numel: 1}}
	withAttrs := NewDict()
	withAttrs.Attrs = NewDict()
	for name, c := range map[string]struct {
		v    any
		want string
	}{
		"cycle":          {loop, "self: a container inside itself"},
		"unloaded":       {List{unloaded}, "[0]: storage holds 0 bytes"},
		"go type":        {List{struct{}{}}, "[0]: cannot pickle a Go struct {}"},
		"dict attrs":     {withAttrs, "a plain dict cannot have attributes"},
		"classless":      {&Object{Kind: NewObject}, "object without a class"},
		"bad dtype":      {DType(99), "invalid dtype"},
		"deep list":      {deepList(maxDepth + 5), "nested deeper"},
		"tensor no data": {&Tensor{DType: Float32}, "tensor has no storage"},
	} {
		var buf discard
		wantError(t, name, Encode(&buf, "a", c.v), c.want)
	}
}

func deepList(n int) any {
	var v any = List{}
	for range n {
		v = List{v}
	}
	return v
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
