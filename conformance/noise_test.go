package conformance

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
	"github.com/google/go-cmp/cmp"
)

// TestSplitWeights: noise-driven elements leave the weights' comparison
// for a band of the tolerance plus twice the smaller run's largest move of
// the tensor's noise-driven elements; outside the band they fail,
// whichever run moved them too far; each tensor has its own band (a
// weight that Adam moves by 4e-3 does not widen the key biases'); and the
// other weights keep the tolerance.
func TestSplitWeights(t *testing.T) {
	l := &model.Layout{Specs: []model.ParamSpec{{Name: "w", Shape: []int{3}, Offset: 0, Numel: 3}, {Name: "kbias", Shape: []int{2}, Offset: 3, Numel: 2},
		{Name: "fc", Shape: []int{2}, Offset: 5, Numel: 2}}, Numel: 7}
	init := []float32{1, 1, 1, 0, 0, 1, 1}
	want := []float32{1.1, 1.2, 1.3, 4e-5, -3e-5, 1.1, 1.004} // the reference moved kbias by up to 4e-5, fc[1] by 4e-3
	mask := []bool{false, false, false, true, true, false, true}
	tol := Defaults(device.F32)
	fcBand := 2*4e-3 + tol.WeightsAbs
	for _, tc := range []struct {
		name               string
		got                []float32
		weightsOK, noiseOK bool
		band               float64 // kbias's
	}{
		{"equal", want, true, true, 2*4e-5 + tol.WeightsAbs},
		{"noise within the band", []float32{1.1, 1.2, 1.3, -3e-5, 2e-5, 1.1, 1.0041}, true, true, 2*3e-5 + tol.WeightsAbs},
		{"moved too far", []float32{1.1, 1.2, 1.3, 2e-4, 0, 1.1, 1.004}, true, false, 2*4e-5 + tol.WeightsAbs},
		{"a key bias off by fc's move", []float32{1.1, 1.2, 1.3, 4e-3, -3e-5, 1.1, 1.004}, true, false, 2*4e-5 + tol.WeightsAbs},
		{"not moved", []float32{1.1, 1.2, 1.3, 0, 0, 1.1, 1.004}, true, false, tol.WeightsAbs},
		{"a real weight off", []float32{1.1, 1.2, 1.30003, 4e-5, -3e-5, 1.1, 1.004}, false, true, 2*4e-5 + tol.WeightsAbs},
		{"a real weight of fc off", []float32{1.1, 1.2, 1.3, 4e-5, -3e-5, 1.10003, 1.004}, false, true, 2*4e-5 + tol.WeightsAbs},
	} {
		w, n := splitWeights(tc.got, want, init, mask, l, tol)
		if w.OK() != tc.weightsOK || n == nil || n.OK() != tc.noiseOK {
			t.Errorf("%s: weights %+v, noise %+v", tc.name, w, n)
		}
		if n == nil {
			continue
		}
		kb, fc := n.Tensors["kbias"], n.Tensors["fc"]
		if w.N != 4 || n.N() != 3 || kb.N != 2 || fc.N != 1 || len(n.Tensors) != 2 || math.Abs(kb.Tol-tc.band) > 1e-10 || math.Abs(fc.Tol-fcBand) > 1e-6 {
			t.Errorf("%s: %d and %d elements compared, noise %+v, want bands %g and %g", tc.name, w.N, n.N(), n, tc.band, fcBand)
		}
	}
	if w, n := splitWeights(want, want, init, nil, l, tol); n != nil || w.N != 7 {
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
	band := 3 * r.Noise.Tensors["blocks.1.attn.qkv.bias"].Tol
	counts := map[string]int{}
	for _, k := range []string{"blocks.0.attn.qkv.bias", "blocks.1.attn.qkv.bias"} {
		counts[k] = r.Noise.Tensors[k].N
	}
	if diff := cmp.Diff(map[string]int{"blocks.0.attn.qkv.bias": 64, "blocks.1.attn.qkv.bias": 64}, counts); diff != "" {
		t.Errorf("noise-driven key biases (-want +got):\n%s", diff)
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
	// Without an Adam optimizer only the zero-gradient rule applies: the
	// key biases exactly.
	mask, err := a.noiseDriven(init, noiseCheck{B: 2, GAS: 2, World: 2})
	if err != nil {
		t.Fatal(err)
	}
	sp := a.layout.Specs[func() int { i, _ := a.layout.Index("blocks.0.attn.qkv.bias"); return i }()]
	d := sp.Numel / 3
	for i := range sp.Numel {
		if mask[sp.Offset+i] != (i >= d && i < 2*d) {
			t.Fatalf("qkv.bias element %d: noise-driven %v; want exactly the key part [%d, %d)", i, mask[sp.Offset+i], d, 2*d)
		}
	}
	// Under the case's AdamW, the small-gradient rule adds a few elements
	// (on this case 14 of 110,336), each with a first-step gradient below
	// 10·eps.
	plan, err := dsconfig.Load(string(c.DSConfig()), dsconfig.Options{WorldSize: 2, DeepSpeedVersion: c.Result.DeepSpeedVersion})
	if err != nil {
		t.Fatal(err)
	}
	nc := noiseCheckOf(plan, c.Result.Steps, Defaults(device.F32))
	if nc.AdamEps != 1e-8 || nc.LRSum <= 0 {
		t.Fatalf("noise check %+v: want AdamW's eps 1e-8 and the reference's lr", nc)
	}
	adam, err := a.noiseDriven(init, nc)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.firstGradient(init, nc, false)
	if err != nil {
		t.Fatal(err)
	}
	extra := 0
	for i := range adam {
		switch {
		case mask[i] && !adam[i]:
			t.Errorf("element %d: a key bias under the zero-gradient rule, not under Adam's", i)
		case adam[i] && !mask[i]:
			extra++
			if gi := math.Abs(float64(g[i]) / 4); gi >= 10*nc.AdamEps {
				t.Errorf("element %d: noise-driven under Adam with a first-step gradient %.2e", i, gi)
			}
		}
	}
	if extra == 0 || extra > len(adam)/5000 {
		t.Errorf("%d small-gradient elements of %d noise-driven; want a few", extra, len(adam))
	}
	if n := r.Noise.N(); n != 128+extra {
		t.Errorf("the report has %d noise-driven elements, the mask %d", n, 128+extra)
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
	if r.Status != Fail || r.Noise == nil || r.Noise.OK() || !strings.Contains(r.Reason, "blocks.1.attn.qkv.bias: max |Δ|") || strings.Contains(r.Reason, "final weights") {
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

// TestNoiseDrivenUlysses: on DeepSpeed 0.14.5's sequence-parallel cases
// (one data-parallel rank, micro-batch 8; at stage 3 the gradients
// averaged over every rank) the wte and wpe elements whose first gradients
// are ~2e-8 are noise-driven under Adam and reported apart, the cases pass,
// and a reference wte element moved by twice its band fails there and only
// there.
func TestNoiseDrivenUlysses(t *testing.T) {
	for _, name := range []string{"gpt/z0_sp2_fp32", "gpt/z3_sp2_fp32"} {
		src := "testdata/deepspeed-0.14.5-cpu-ulysses/" + name
		r := Run(Case{Name: name, Dir: src})
		if r.Status != Pass || r.Noise == nil {
			t.Fatalf("%s: %s %s, noise %+v", src, r.Status, r.Reason, r.Noise)
		}
		if r.Noise.Tensors["wte.weight"].N == 0 || r.Noise.Tensors["wpe.weight"].N == 0 {
			t.Errorf("%s: noise-driven tensors %v; want wte.weight [35, 21] and wpe.weight [26, 17] among them", name, r.Noise.Tensors)
		}
	}
	src := "testdata/deepspeed-0.14.5-cpu-ulysses/gpt/z0_sp2_fp32"
	r := Run(Case{Name: "gpt/z0_sp2_fp32", Dir: src})
	band := r.Noise.Tensors["wte.weight"].Tol
	moved := changedCase(t, src, "z0_sp2_wte", func(result, final []byte) ([]byte, []byte) {
		hdr := int64(binary.LittleEndian.Uint64(final))
		f, err := model.OpenSafetensors(filepath.Join(src, FinalFile))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ti, ok := f.Lookup("wte.weight")
		if !ok || ti.DType != "F32" {
			t.Fatalf("%s: no F32 wte.weight", FinalFile)
		}
		at := 8 + hdr + ti.Begin + 4*int64(35*64+21)
		v := math.Float32frombits(binary.LittleEndian.Uint32(final[at:]))
		binary.LittleEndian.PutUint32(final[at:], math.Float32bits(v+float32(2*band)))
		return result, final
	})
	r = Run(Case{Name: "gpt/z0_sp2_wte", Dir: moved})
	if r.Status != Fail || !strings.Contains(r.Reason, "wte.weight: max |Δ|") || strings.Contains(r.Reason, "final weights") {
		t.Errorf("a wte element two bands off: %s: %s", r.Status, r.Reason)
	}
}
