package ptfile

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// torchPython returns a python3 that imports torch, or skips the test. CI
// gets one from Debian's python3-torch; PTFILE_PYTHON overrides the search.
func torchPython(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("PTFILE_PYTHON"), "/usr/bin/python3", "python3"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if exec.Command(c, "-c", "import torch").Run() == nil {
			return c
		}
	}
	t.Skip("no python3 with torch (Debian: apt-get install python3-torch; or set PTFILE_PYTHON): the PyTorch interop tests did not run")
	return ""
}

// torchDescribe loads each file with torch.load and returns the
// descriptions (see describe).
func torchDescribe(t *testing.T, py string, files ...string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "describe.json")
	cmd := exec.Command(py, append([]string{"testdata/interop.py", "describe", out}, files...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch.load: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	descs := make([]string, len(raw))
	for i, r := range raw {
		if descs[i], err = canonicalJSON(string(r)); err != nil {
			t.Fatal(err)
		}
	}
	return descs
}

func sameDescription(t *testing.T, what, goDesc, torchDesc string) {
	t.Helper()
	g, err := canonicalJSON(goDesc)
	if err != nil {
		t.Fatal(err)
	}
	if g != torchDesc {
		t.Errorf("%s: Go and torch see different values %s", what, firstDiff(g, torchDesc))
	}
}

// everything builds a value using every feature the writer has; large adds
// a 1100-item dict and a 2500-item list (batches, LONG_BINPUT).
func everything(large bool) *Dict {
	root := NewDict()
	f32 := FromFloat32([]int64{2, 3}, []float32{1, -2.5, 3.25, 0, float32(math.Inf(1)), float32(math.Copysign(0, -1))})
	root.Set("f32", f32)
	t, _ := f32.View(0, []int64{3, 2}, []int64{1, 3})
	root.Set("f32_t", t)
	row, _ := f32.View(3, []int64{3}, []int64{1})
	root.Set("f32_row1", row)
	root.Set("f64", NewTensor(Float64, []int64{1}, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}))
	root.Set("bf16", FromBits16(BFloat16, []int64{5}, []uint16{0x3f80, 0xc000, 0x7f80, 0x0001, 0x7fc1}))
	root.Set("f16", FromBits16(Float16, []int64{4}, []uint16{0x3c00, 0x7bff, 0x0001, 0xfc00}))
	root.Set("i64", FromInt64(Int64, []int64{4}, []int64{math.MinInt64, -1, 0, math.MaxInt64}))
	root.Set("i32", FromInt64(Int32, []int64{2}, []int64{math.MinInt32, 7}))
	root.Set("i16", FromInt64(Int16, []int64{1}, []int64{-300}))
	root.Set("i8", FromInt64(Int8, []int64{2}, []int64{-128, 127}))
	root.Set("u8", FromInt64(Uint8, []int64{2}, []int64{0, 255}))
	root.Set("bool", FromInt64(Bool, []int64{3}, []int64{1, 0, 5}))
	root.Set("scalar", FromFloat32(nil, []float32{10}))
	root.Set("empty", FromFloat32([]int64{0}, nil))
	p := FromFloat32([]int64{2}, []float32{0.5, 1})
	p.Parameter, p.RequiresGrad = true, true
	root.Set("param", p)
	rg := FromFloat32([]int64{1}, []float32{2})
	rg.RequiresGrad = true
	root.Set("requires_grad", rg)

	// A DeepSpeed-style module state dict: views into one flat bf16 buffer.
	flat := FromBits16(BFloat16, []int64{10}, []uint16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	sd := NewOrderedDict()
	w, _ := flat.View(0, []int64{2, 3}, []int64{3, 1})
	b, _ := flat.View(6, []int64{4}, []int64{1})
	sd.Set("fc.weight", w)
	sd.Set("fc.bias", b)
	meta := NewOrderedDict()
	v1 := NewDict()
	v1.Set("version", 1)
	meta.Set("", v1)
	meta.Set("fc", v1)
	sd.Attrs = NewDict()
	sd.Attrs.Set("_metadata", meta)
	root.Set("module", sd)

	scaler := &Object{Module: "deepspeed.runtime.fp16.loss_scaler", Name: "LossScaler", Kind: NewObject, Args: Tuple{}}
	st := NewDict()
	st.Set("cur_scale", 65536.0)
	st.Set("dynamic", false)
	scaler.State = st
	frag := &Object{Module: "deepspeed.utils.tensor_fragment", Name: "fragment_address", Kind: NewObject, Args: Tuple{}}
	fs := NewDict()
	fs.Set("numel", 1024)
	fs.Set("start", 0)
	frag.State = fs
	ds := NewDict()
	ds.Set("loss_scaler", scaler)
	ds.Set("zero_stage", &Object{Module: "deepspeed.runtime.zero.config", Name: "ZeroStageEnum", Kind: EnumMember, Attr: "gradients"})
	ds.Set("fragments", List{frag, frag})
	root.Set("deepspeed", ds)
	root.Set("device", &Object{Module: "torch", Name: "device", Kind: CallObject, Args: Tuple{"cpu"}})

	if large {
		big := NewDict()
		for i := range 1100 {
			big.Set(i, float64(i)/3)
		}
		root.Set("big", big)
		long := make(List, 2500)
		for i := range long {
			long[i] = strings.Repeat("x", i%7)
		}
		root.Set("long_list", long)
	}
	plain := NewDict()
	plain.Set(int64(7), "int key")
	plain.Set(nil, "none key")
	plain.Set(1.5, "float key")
	plain.Set(true, "bool key")
	root.Set("keys", plain)
	root.Set("plain", List{int64(1), int64(-1), int64(255), int64(256), int64(65536), int64(1) << 40, uint64(1) << 63,
		-1.5, math.Inf(-1), "h\u00e9llo \u2713", nil, true, false, Tuple{}, Tuple{1}, Tuple{1, 2}, Tuple{1, 2, 3},
		Tuple{1, 2, 3, 4, 5}, List{}, NewDict(), Bytes{0, 0xff}, Bytes(strings.Repeat("b", 300)), Bytes{}})
	root.Set("size", Size{2, 3})
	root.Set("set", Set{"a", "b", int64(3)})
	root.Set("dtype", BFloat16)
	root.Set("shared_dict", v1)
	return root
}

// TestTorchLoadsGoFile writes a checkpoint using every feature and checks
// that torch.load sees exactly the values, dtypes, views, shared storages,
// OrderedDicts and DeepSpeed objects that were written.
func TestTorchLoadsGoFile(t *testing.T) {
	py := torchPython(t)
	path := filepath.Join(t.TempDir(), "go_written.pt")
	root := everything(true)
	if err := Write(path, root); err != nil {
		t.Fatal(err)
	}
	got := torchDescribe(t, py, path)
	sameDescription(t, path, describe(root), got[0])
	back, err := Read(path, dsOpts)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := describe(root), describe(back); a != b {
		t.Errorf("Go read-back differs %s", firstDiff(a, b))
	}
}

// TestGoReadsTorchFile has torch.save a fixture (protocol 2, torch's
// default, and protocol 4) and checks that ptfile reads what torch.load does.
func TestGoReadsTorchFile(t *testing.T) {
	py := torchPython(t)
	dir := t.TempDir()
	if b, err := exec.Command(py, "testdata/interop.py", "make", dir).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, b)
	}
	files := []string{filepath.Join(dir, "torch_p2.pt"), filepath.Join(dir, "torch_p4.pt")}
	want := torchDescribe(t, py, files...)
	for i, f := range files {
		v, err := Read(f, dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		sameDescription(t, f, describe(v), want[i])
	}
}

// TestTorchReadsRewrittenDeepSpeedFiles reads real DeepSpeed files, writes
// them with ptfile, and checks that torch.load sees the same in the
// original, in the rewrite and in what ptfile read.
func TestTorchReadsRewrittenDeepSpeedFiles(t *testing.T) {
	py := torchPython(t)
	files, _ := filepath.Glob("testdata/*.pt")
	var all []string
	var ours []string
	for _, f := range files {
		v, err := Read(f, dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), filepath.Base(f))
		if err := Write(out, v); err != nil {
			t.Fatal(err)
		}
		all = append(all, f, out)
		ours = append(ours, describe(v))
	}
	descs := torchDescribe(t, py, all...)
	for i := range files {
		if descs[2*i] != descs[2*i+1] {
			t.Errorf("%s: torch sees the rewrite differently %s", files[i], firstDiff(descs[2*i], descs[2*i+1]))
		}
		sameDescription(t, files[i], ours[i], descs[2*i])
	}
}
