package llama

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// TestInvFreqMatchesTransformers reads each configuration of
// testdata/rope.json (written by the reference's rope functions, which
// follow modeling_rope_utils.py) through ParseConfig and compares InvFreq
// and the attention scaling. Float32 pow may differ by an ulp between
// Sleef and Go's math.Pow, so the inverse frequencies are compared within
// 2 ulps (3e-7 relative).
func TestInvFreqMatchesTransformers(t *testing.T) {
	b, err := os.ReadFile("testdata/rope.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]struct {
		Config           json.RawMessage `json:"config"`
		InvFreq          []float64       `json:"inv_freq"`
		AttentionScaling float64         `json:"attention_scaling"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("rope.json has %d cases", len(cases))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseConfig(name, tc.Config)
			if err != nil {
				t.Fatal(err)
			}
			inv, scaling := cfg.InvFreq()
			if len(inv) != len(tc.InvFreq) {
				t.Fatalf("%d inverse frequencies, want %d", len(inv), len(tc.InvFreq))
			}
			for i, w := range tc.InvFreq {
				if d := math.Abs(float64(inv[i]) - w); d > 3e-7*w {
					t.Errorf("inv_freq[%d] = %.9g, transformers %.9g (rel %.2e)", i, inv[i], w, d/w)
				}
			}
			if math.Abs(scaling-tc.AttentionScaling) > 1e-12 {
				t.Errorf("attention scaling %.15g, transformers %.15g", scaling, tc.AttentionScaling)
			}
		})
	}
}

// TestRopeBackwardIsTranspose checks that ropeBackward applies the
// transpose of ropeForward's rotation: <R x, y> = <x, Rᵀ y>.
func TestRopeBackwardIsTranspose(t *testing.T) {
	const N, heads, D = 3, 2, 8
	cfg := Config{Family: Llama, Vocab: 4, Hidden: 16, Intermediate: 4, Layers: 1, Heads: 2, Rope: Rope{Theta: 100}}.WithDefaults()
	inv, _ := cfg.InvFreq()
	cos, sin := make([]float32, N*D/2), make([]float32, N*D/2)
	ropeTables(cos, sin, inv, 1, []int32{0, 5, 11}, nil)
	x, y := make([]float32, N*heads*D), make([]float32, N*heads*D)
	for i := range x {
		x[i], y[i] = float32(math.Sin(float64(i))), float32(math.Cos(float64(3*i)))
	}
	rx := append([]float32(nil), x...)
	ropeForward(rx, N, heads, D, heads*D, cos, sin)
	rty := append([]float32(nil), y...)
	ropeBackward(rty, N, heads, D, heads*D, cos, sin)
	var a, b float64
	for i := range x {
		a += float64(rx[i]) * float64(y[i])
		b += float64(x[i]) * float64(rty[i])
	}
	if math.Abs(a-b) > 1e-5 {
		t.Errorf("<Rx, y> = %v, <x, Rᵀy> = %v", a, b)
	}
	// Position 0 is the identity.
	for i := range heads * D {
		if rx[i] != x[i] {
			t.Fatalf("position 0 rotated element %d: %v -> %v", i, x[i], rx[i])
		}
	}
}

// TestDynamicRopeBeyondMaxPositions: dynamic NTK scaling changes θ only
// past max_position_embeddings, which this model refuses with an error
// naming the position.
func TestDynamicRopeBeyondMaxPositions(t *testing.T) {
	cfg, _ := Preset("tiny-llama")
	cfg.Rope = Rope{Type: RopeDynamic, Theta: 10000, Factor: 2}
	cfg.MaxPositions = 16
	m, _ := newTestModel(t, cfg, Options{}, perturbedInit(cfg, 1))
	b := randomBatch(newRand(1), 1, 8, cfg.Vocab)
	if _, err := m.Forward(b); err != nil {
		t.Fatalf("within max_position_embeddings: %v", err)
	}
	b.Positions = []int32{10, 11, 12, 13, 14, 15, 16, 17}
	if _, err := m.Forward(b); err == nil || !contains(err, "position 17") || !contains(err, "dynamic") {
		t.Errorf("positions past max_position_embeddings: %v", err)
	}
}
