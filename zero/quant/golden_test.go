package quant

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/dszero/dszero/half"
)

// portGolden is testdata/port_golden.json, written by
// conformance/reference/gen_quant_golden.py: DeepSpeed 0.14.5's quantizer
// op as conformance/reference/quantizer_port.py computes it (the torch
// port the ZeRO++ conformance cases run), with CUDAQuantizer's own group
// counts. Regenerate with the command in that script's doc.
type portGolden struct {
	Weights []struct {
		N, Groups      int
		X, Dequantized []uint16 // fp16 bits
		Q              []int8
		Scales         []uint32 // float32 bits
	}
	Swizzle []struct {
		N, Groups, Nodes, Devices int
		X                         []uint16
		Q                         []int8
		Scales                    []uint32
	}
	Reduction []struct {
		InGroups  int `json:"in_groups"`
		OutGroups int `json:"out_groups"`
		Devices   int
		QIn       []int8   `json:"q_in"`
		ScalesIn  []uint32 `json:"scales_in"`
		Q         []int8
		Scales    []uint32
		Dequant   []uint16 `json:"dequantized"`
	}
}

func f16s(b []uint16) []float32 {
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = half.F32FromF16(v)
	}
	return x
}

func f32s(b []uint32) []float32 {
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = math.Float32frombits(v)
	}
	return x
}

func bytesOf(q []int8) []byte {
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	return b
}

func sameBytes(t *testing.T, what string, got []byte, want []int8) {
	t.Helper()
	for i := range want {
		if got[i] != byte(want[i]) {
			t.Errorf("%s: byte %d: %#02x, want %#02x", what, i, got[i], byte(want[i]))
			return
		}
	}
}

func sameBits(t *testing.T, what string, got []float32, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: element %d: %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// TestPortGolden: this package and the Python port of DeepSpeed's
// kernels agree bit for bit: qwZ's group counts, bytes, scales and fp16
// dequantization; qgZ's swizzled int4 quantization and its
// dequantize-add-requantize reduction.
func TestPortGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/port_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g portGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Weights) == 0 || len(g.Swizzle) == 0 || len(g.Reduction) == 0 {
		t.Fatal("empty golden file")
	}
	for _, c := range g.Weights {
		groups, err := WeightGroups(c.N)
		if err != nil || groups != c.Groups {
			t.Errorf("n=%d: WeightGroups %d, %v; CUDAQuantizer %d", c.N, groups, err, c.Groups)
			continue
		}
		q, s := make([]byte, c.N), make([]float32, groups)
		Quantize(q, s, f16s(c.X), 8)
		sameBytes(t, "qwZ bytes", q, c.Q)
		sameBits(t, "qwZ scales", s, f32s(c.Scales))
		d := make([]float32, c.N)
		Dequantize(d, q, s, 8, half.NearestF16)
		sameBits(t, "qwZ dequantized", d, f16s(c.Dequantized))
	}
	for _, c := range g.Swizzle {
		q, s := make([]byte, c.N/2), make([]float32, c.Groups)
		SwizzleQuantize(q, s, f16s(c.X), 4, c.Nodes, c.Devices)
		sameBytes(t, "qgZ swizzled bytes", q, c.Q)
		sameBits(t, "qgZ swizzled scales", s, f32s(c.Scales))
	}
	for _, c := range g.Reduction {
		m := len(c.QIn) / c.Devices
		q, s := make([]byte, m), make([]float32, c.OutGroups)
		ReduceQuantized(q, s, bytesOf(c.QIn), f32s(c.ScalesIn), 4, c.Devices, make([]float32, 2*m), half.NearestF16)
		sameBytes(t, "qgZ reduced bytes", q, c.Q)
		sameBits(t, "qgZ reduced scales", s, f32s(c.Scales))
		d := make([]float32, 2*m)
		Dequantize(d, q, s, 4, half.NearestF16)
		sameBits(t, "qgZ reduced, dequantized", d, f16s(c.Dequant))
	}
}
