package conformance

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/google/go-cmp/cmp"
)

// TestSplitWeights: noise-driven elements leave the weights' comparison
// for a band of the tolerance plus twice the smaller run's largest move of
// them; outside the band they fail, whichever run moved them too far, and
// the other weights keep the tolerance.
func TestSplitWeights(t *testing.T) {
	l := &model.Layout{Specs: []model.ParamSpec{{Name: "w", Shape: []int{3}, Offset: 0, Numel: 3}, {Name: "kbias", Shape: []int{2}, Offset: 3, Numel: 2}}, Numel: 5}
	init := []float32{1, 1, 1, 0, 0}
	want := []float32{1.1, 1.2, 1.3, 4e-5, -3e-5} // the reference moved kbias by up to 4e-5
	mask := []bool{false, false, false, true, true}
	tol := Defaults("fp32")
	for _, tc := range []struct {
		name               string
		got                []float32
		weightsOK, noiseOK bool
		band               float64
	}{
		{"equal", want, true, true, 2*4e-5 + tol.WeightsAbs},
		{"noise within the band", []float32{1.1, 1.2, 1.3, -3e-5, 2e-5}, true, true, 2*3e-5 + tol.WeightsAbs},
		{"moved too far", []float32{1.1, 1.2, 1.3, 2e-4, 0}, true, false, 2*4e-5 + tol.WeightsAbs},
		{"not moved", []float32{1.1, 1.2, 1.3, 0, 0}, true, false, tol.WeightsAbs},
		{"a real weight off", []float32{1.1, 1.2, 1.30003, 4e-5, -3e-5}, false, true, 2*4e-5 + tol.WeightsAbs},
	} {
		w, n, _ := splitWeights(tc.got, want, init, mask, nil, 0, l, tol)
		if w.OK() != tc.weightsOK || n == nil || n.Weights.OK() != tc.noiseOK {
			t.Errorf("%s: weights %+v, noise %+v", tc.name, w, n)
		}
		if n != nil && (w.N != 3 || n.Weights.N != 2 || n.Tensors["kbias"] != 2 || math.Abs(n.Weights.Tol-tc.band) > 1e-10) {
			t.Errorf("%s: %d and %d elements compared, noise %+v, want band %g", tc.name, w.N, n.Weights.N, n, tc.band)
		}
	}
	if w, n, e := splitWeights(want, want, init, nil, nil, 0, l, tol); n != nil || e != nil || w.N != 5 {
		t.Errorf("no mask: %+v, %+v", w, n)
	}
}

// TestNoiseDriven: on the shipped GPT the noise-driven elements are
// exactly the key biases (softmax ignores them), which the report holds
// apart; a run whose learning rate differs from the reference's fails,
// its noise-driven weights included.
func TestNoiseDriven(t *testing.T) {
	src := "testdata/deepspeed-0.14.5-cpu/gpt/z2_fp32"
	r := Run(Case{Name: "gpt/z2_fp32", Dir: src})
	if r.Status != Pass || r.Noise == nil {
		t.Fatalf("%s: %s %s, noise %+v", src, r.Status, r.Reason, r.Noise)
	}
	band := 3 * r.Noise.Weights.Tol
	if diff := cmp.Diff(map[string]int{"blocks.0.attn.qkv.bias": 64, "blocks.1.attn.qkv.bias": 64}, r.Noise.Tensors); diff != "" {
		t.Errorf("noise-driven tensors (-want +got):\n%s", diff)
	}
	c := Case{Dir: src}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	desc, err := readModel(&c)
	if err != nil {
		t.Fatal(err)
	}
	a, err := buildArch(&c, desc)
	if err != nil {
		t.Fatal(err)
	}
	init, err := a.loadData(&c, desc)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := a.firstGrads(init, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	mask := noiseDriven(grads)
	sp := a.layout.Specs[func() int { i, _ := a.layout.Index("blocks.0.attn.qkv.bias"); return i }()]
	d := sp.Numel / 3
	for i := range sp.Numel {
		if mask[sp.Offset+i] != (i >= d && i < 2*d) {
			t.Fatalf("qkv.bias element %d: noise-driven %v; want exactly the key part [%d, %d)", i, mask[sp.Offset+i], d, 2*d)
		}
	}

	// The same case twice more: with 4 times the learning rate, and with
	// the reference's final key biases moved by three bands.
	lr := changedCase(t, src, "z2_lr", func(result, final []byte) ([]byte, []byte) {
		changed := strings.Replace(string(result), `"lr": 0.001`, `"lr": 0.004`, 1)
		if changed == string(result) {
			t.Fatal(`no "lr": 0.001 in the case's ds_config`)
		}
		return []byte(changed), final
	})
	r = Run(Case{Name: "gpt/z2_lr", Dir: lr})
	if r.Status != Fail || r.Noise == nil || !strings.Contains(r.Reason, "final weights: max |Δ|") || !strings.Contains(r.Reason, "lr: max rel Δ") {
		t.Errorf("4× the learning rate: %s: %s; noise %+v", r.Status, r.Reason, r.Noise)
	}
	moved := changedCase(t, src, "z2_kbias", func(result, final []byte) ([]byte, []byte) {
		hdr := int64(binary.LittleEndian.Uint64(final))
		f, err := model.OpenSafetensors(filepath.Join(src, FinalFile))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ti, ok := f.Lookup("blocks.1.attn.qkv.bias")
		if !ok || ti.DType != "F32" {
			t.Fatalf("%s: no F32 blocks.1.attn.qkv.bias", FinalFile)
		}
		at := 8 + hdr + ti.Begin + 4*int64(d+5) // a key element
		v := math.Float32frombits(binary.LittleEndian.Uint32(final[at:]))
		binary.LittleEndian.PutUint32(final[at:], math.Float32bits(v+float32(band)))
		return result, final
	})
	r = Run(Case{Name: "gpt/z2_kbias", Dir: moved})
	if r.Status != Fail || r.Noise == nil || r.Noise.Weights.OK() || !strings.Contains(r.Reason, "noise-driven weights (128 elements)") || strings.Contains(r.Reason, "final weights") {
		t.Errorf("a key bias three bands off: %s: %s; noise %+v", r.Status, r.Reason, r.Noise)
	}
}

// changedCase copies the case at src to a temporary tree beside a link to
// its init directory, with change applied to its result.json and final
// weights, and returns the copy's directory.
func changedCase(t *testing.T, src, name string, change func(result, final []byte) ([]byte, []byte)) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "gpt", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mustAbs(t, filepath.Dir(filepath.Dir(src))), "init"), filepath.Join(root, "init")); err != nil {
		t.Fatal(err)
	}
	result, err1 := os.ReadFile(filepath.Join(src, ResultFile))
	final, err2 := os.ReadFile(filepath.Join(src, FinalFile))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	result, final = change(result, final)
	if os.WriteFile(filepath.Join(dir, ResultFile), result, 0o644) != nil || os.WriteFile(filepath.Join(dir, FinalFile), final, 0o644) != nil {
		t.Fatal("writing the changed case")
	}
	return dir
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
