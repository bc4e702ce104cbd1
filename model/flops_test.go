package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		x    float64
		bits int
		want string // what Python 3.11's repr prints
	}{
		{0, 64, "0.0"},
		{-0.0 * -1, 64, "0.0"},
		{1, 64, "1.0"},
		{12, 64, "12.0"},
		{433.07, 64, "433.07"},
		{0.1, 64, "0.1"},
		{1e-4, 64, "0.0001"},
		{1e-5, 64, "1e-05"},
		{1.5e-5, 64, "1.5e-05"},
		{1e-6, 64, "1e-06"},
		{123456789012345.6, 64, "123456789012345.6"},
		{9999999999999998, 64, "9999999999999998.0"},
		{1e16, 64, "1e+16"},
		{1.5e16, 64, "1.5e+16"},
		{1e22, 64, "1e+22"},
		{-2.5, 64, "-2.5"},
		{5e-324, 64, "5e-324"},
		// A float32 config value Python was given as "1e-5".
		{float64(float32(1e-5)), 32, "1e-05"},
		{float64(float32(1e-5)), 64, "9.999999747378752e-06"},
	} {
		if got := PyFloat(c.x, c.bits); got != c.want {
			t.Errorf("PyFloat(%v, %d) = %q, want %q", c.x, c.bits, got, c.want)
		}
	}
}

func TestFlopTreeAndModules(t *testing.T) {
	var tr FlopTree
	tr.Enter(Container("", "Net"))
	tr.Add(Embedding("emb", "emb.weight", 10, 4, 3))
	tr.Enter(Container("body", "Body"))
	tr.Add(Linear("fc", "body.fc", 6, 4, 5, true))
	tr.Add(LayerNorm("ln", "body.ln", 6, 5, 1e-5, 64))
	tr.Leave()
	tr.Add(Linear("head", "head", 6, 5, 10, false))
	tr.Leave()
	want := []FlopModule{
		{Depth: 0, Class: "Net", Unit: NoUnit},
		{Depth: 1, Name: "emb", Class: "Embedding", Extra: "10, 4, padding_idx=3", Params: []string{"emb.weight"}, Unit: NoUnit},
		{Depth: 1, Name: "body", Class: "Body", Unit: NoUnit},
		// F.linear: 6 rows · 4 in · 5 out = 120 MACs; the bias is not counted.
		{Depth: 2, Name: "fc", Class: "Linear", Extra: "in_features=4, out_features=5, bias=True",
			Params: []string{"body.fc.weight", "body.fc.bias"}, MACs: 120, FLOPs: 240, Unit: NoUnit},
		// F.layer_norm with weight: 5 · 6 · 5.
		{Depth: 2, Name: "ln", Class: "LayerNorm", Extra: "(5,), eps=1e-05, elementwise_affine=True",
			Params: []string{"body.ln.weight", "body.ln.bias"}, FLOPs: 150, Unit: NoUnit},
		{Depth: 1, Name: "head", Class: "Linear", Extra: "in_features=5, out_features=10, bias=False",
			Params: []string{"head.weight"}, MACs: 300, FLOPs: 600, Unit: NoUnit},
	}
	if d := cmp.Diff(want, tr.Modules()); d != "" {
		t.Errorf("modules (-want +got):\n%s", d)
	}
	defer func() {
		if recover() == nil {
			t.Error("Leave at the root did not panic")
		}
	}()
	tr.Leave()
}

func TestMatmulCounts(t *testing.T) {
	// q (2, 3, 5, 4) @ kᵀ (…, 4, 5): 2·3·5·4 elements times 5 columns.
	if got := MatmulMACs(2*3*5*4, 5); got != 600 {
		t.Errorf("MatmulMACs = %d, want 600", got)
	}
	// SDPA, q (2, 3, 5, 4), k (…, 7, 4), v (…, 7, 6): 2·3·5·4·7 + 2·3·5·7·6.
	if got := SDPAMACs(2, 3, 5, 4, 7, 6); got != 840+1260 {
		t.Errorf("SDPAMACs = %d, want 2100", got)
	}
}
