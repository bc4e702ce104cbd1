package gpt

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// rawTensor is a tensor written byte for byte by writeRaw.
type rawTensor struct {
	name, dtype string
	shape       []int
	data        []byte
}

// writeRaw writes a safetensors file by hand (any dtype), independently
// of model.WriteSafetensors.
func writeRaw(t *testing.T, path string, ts []rawTensor) {
	t.Helper()
	hdr := map[string]any{}
	var data []byte
	for _, r := range ts {
		hdr[r.name] = map[string]any{"dtype": r.dtype, "shape": r.shape, "data_offsets": []int{len(data), len(data) + len(r.data)}}
		data = append(data, r.data...)
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(append(out, hb...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func f32bytes(v []float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func seq(from float32, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = from + float32(i)
	}
	return out
}

// handCfg is a model small enough to write every tensor by hand.
var handCfg = Config{Vocab: 3, Context: 2, Dim: 2, Heads: 1, Layers: 1, MLP: 3}

// handHF is handCfg's weights in Hugging Face layout, each tensor filled
// with consecutive numbers, plus the mask buffer old checkpoints carry.
func handHF(prefix string) []rawTensor {
	f := func(name string, from float32, shape ...int) rawTensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return rawTensor{prefix + name, "F32", shape, f32bytes(seq(from, n))}
	}
	return []rawTensor{
		f("wte.weight", 0, 3, 2),
		f("wpe.weight", 10, 2, 2),
		f("h.0.ln_1.weight", 20, 2),
		f("h.0.ln_1.bias", 30, 2),
		f("h.0.attn.c_attn.weight", 0, 2, 6), // Conv1D (in, out)
		f("h.0.attn.c_attn.bias", 40, 6),
		f("h.0.attn.c_proj.weight", 300, 2, 2),
		f("h.0.attn.c_proj.bias", 50, 2),
		f("h.0.attn.bias", 0, 1, 1, 2, 2), // causal mask buffer: ignored
		f("h.0.ln_2.weight", 60, 2),
		f("h.0.ln_2.bias", 70, 2),
		f("h.0.mlp.c_fc.weight", 100, 2, 3),
		f("h.0.mlp.c_fc.bias", 80, 3),
		f("h.0.mlp.c_proj.weight", 200, 3, 2),
		f("h.0.mlp.c_proj.bias", 90, 2),
		f("ln_f.weight", 400, 2),
		f("ln_f.bias", 410, 2),
		{"lm_head.weight", "F32", []int{3, 2}, f32bytes(seq(500, 6))}, // never prefixed
	}
}

func TestReadHFTransposesByHand(t *testing.T) {
	cfg := handCfg.WithDefaults()
	l := cfg.Layout()
	view := func(params []float32, name string) []float32 {
		i, ok := l.Index(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return l.View(params, i)
	}
	for _, prefix := range []string{"", "transformer."} {
		path := filepath.Join(t.TempDir(), "hf.safetensors")
		writeRaw(t, path, handHF(prefix))
		params := make([]float32, cfg.NumParams())
		if err := ReadWeights(path, cfg, params); err != nil {
			t.Fatal(err)
		}
		// Ours is (out, in): ours[o][i] = file[i][o].
		want := map[string][]float32{
			"blocks.0.attn.qkv.weight":  {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11},
			"blocks.0.attn.proj.weight": {300, 302, 301, 303},
			"blocks.0.mlp.fc.weight":    {100, 103, 101, 104, 102, 105},
			"blocks.0.mlp.proj.weight":  {200, 202, 204, 201, 203, 205},
			"blocks.0.attn.qkv.bias":    {40, 41, 42, 43, 44, 45},
			"wte.weight":                {0, 1, 2, 3, 4, 5},
			"lm_head.weight":            {500, 501, 502, 503, 504, 505},
		}
		got := map[string][]float32{}
		for name := range want {
			got[name] = view(params, name)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("prefix %q (-want +got):\n%s", prefix, d)
		}

		// Writing back gives the hand-made Conv1D tensors.
		out := filepath.Join(t.TempDir(), "out.safetensors")
		if err := WriteHF(out, cfg, params); err != nil {
			t.Fatal(err)
		}
		f, err := model.OpenSafetensors(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range handHF("") {
			if r.name == "h.0.attn.bias" {
				if _, ok := f.Lookup(r.name); ok {
					t.Errorf("WriteHF wrote the mask buffer")
				}
				continue
			}
			ti, ok := f.Lookup(r.name)
			if !ok || !slices.Equal(ti.Shape, r.shape) {
				t.Errorf("%s: written %+v, want shape %v", r.name, ti, r.shape)
				continue
			}
			v := make([]float32, ti.Numel())
			if err := f.ReadFloat32(r.name, v); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f32bytes(v), r.data) {
				t.Errorf("%s: written %v", r.name, v)
			}
		}
		f.Close()
	}
}

func TestSaveDirRoundTrip(t *testing.T) {
	for _, cfg := range []Config{
		{Vocab: 50, Context: 16, Dim: 24, Heads: 2, Layers: 2, MLP: 40},
		{Vocab: 50, Context: 16, Dim: 24, Heads: 3, Layers: 3, Tied: true},
	} {
		cfg = cfg.WithDefaults()
		params := make([]float32, cfg.NumParams())
		l := cfg.Layout()
		l.InitRange(21, params, 0)
		dir := filepath.Join(t.TempDir(), "ckpt")
		if err := SaveDir(dir, cfg, params); err != nil {
			t.Fatal(err)
		}
		gotCfg, got, err := ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if gotCfg != cfg {
			t.Errorf("config %+v came back as %+v", cfg, gotCfg)
		}
		if !slices.Equal(got, params) {
			t.Errorf("tied=%v: parameters changed in the round trip", cfg.Tied)
		}
		f, err := model.OpenSafetensors(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		_, head := f.Lookup("lm_head.weight")
		_, cattn := f.Lookup("h.0.attn.c_attn.weight")
		f.Close()
		if head == cfg.Tied || !cattn {
			t.Errorf("tied=%v: lm_head.weight present %v, h.0.attn.c_attn.weight present %v", cfg.Tied, head, cattn)
		}
		m, err := LoadDir(dir, Options{Gemm: modeltest.Gonum(t), Acct: newAcct()})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.Params(), params) || m.Config() != cfg {
			t.Errorf("LoadDir gave another model")
		}
		again := filepath.Join(t.TempDir(), "again")
		if err := m.SaveDir(again); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		b, _ := os.ReadFile(filepath.Join(again, "model.safetensors"))
		if !slices.Equal(a, b) {
			t.Errorf("Model.SaveDir wrote other bytes than SaveDir")
		}
		m.Close()
	}
}

func TestCanonicalRoundTrip(t *testing.T) {
	cfg, params := harnessTiny(t)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := WriteWeights(path, cfg, params); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(params))
	if err := ReadWeights(path, cfg, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, params) {
		t.Error("canonical round trip changed the parameters")
	}
}

func TestReadWeights16Bit(t *testing.T) {
	cfg := handCfg.WithDefaults()
	ts := handHF("")
	// Values 0..11 and 300..303 are exact in both formats.
	var bf, hf []byte
	for _, v := range seq(0, 12) {
		bf = binary.LittleEndian.AppendUint16(bf, half.BF16FromF32(v))
	}
	for _, v := range seq(300, 4) {
		hf = binary.LittleEndian.AppendUint16(hf, half.F16FromF32(v))
	}
	ts[4] = rawTensor{ts[4].name, "BF16", ts[4].shape, bf}
	ts[6] = rawTensor{ts[6].name, "F16", ts[6].shape, hf}
	path := filepath.Join(t.TempDir(), "mixed.safetensors")
	writeRaw(t, path, ts)
	want := make([]float32, cfg.NumParams())
	writeRaw(t, path+".f32", handHF(""))
	if err := ReadWeights(path+".f32", cfg, want); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, cfg.NumParams())
	if err := ReadWeights(path, cfg, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("BF16/F16 tensors were not widened exactly:\n%v\n%v", got, want)
	}
}

func TestReadWeightsErrors(t *testing.T) {
	cfg := handCfg.WithDefaults()
	without := func(name string) []rawTensor {
		return slices.DeleteFunc(handHF(""), func(r rawTensor) bool { return r.name == name })
	}
	with := func(r rawTensor) []rawTensor { return append(handHF(""), r) }
	replace := func(r rawTensor) []rawTensor {
		ts := handHF("")
		for i := range ts {
			if ts[i].name == r.name {
				ts[i] = r
			}
		}
		return ts
	}
	for _, tc := range []struct {
		name string
		ts   []rawTensor
		want []string
	}{
		{"missing", without("h.0.mlp.c_fc.bias"), []string{`missing tensor "h.0.mlp.c_fc.bias" [3]`}},
		{"unknown", with(rawTensor{"h.1.ln_1.weight", "F32", []int{2}, f32bytes(seq(0, 2))}),
			[]string{`unknown tensor "h.1.ln_1.weight"`, "L=1"}},
		{"shape", replace(rawTensor{"h.0.attn.c_attn.weight", "F32", []int{6, 2}, f32bytes(seq(0, 12))}),
			[]string{`tensor "h.0.attn.c_attn.weight" has shape [6 2], want [2 6]`}},
		{"dtype", replace(rawTensor{"wpe.weight", "I64", []int{2, 2}, make([]byte, 32)}),
			[]string{`tensor "wpe.weight" has dtype I64, want F32`}},
		{"two problems", without("ln_f.bias")[1:], []string{`missing tensor "wte.weight"`, `missing tensor "ln_f.bias"`}},
	} {
		path := filepath.Join(t.TempDir(), tc.name+".safetensors")
		writeRaw(t, path, tc.ts)
		err := ReadWeights(path, cfg, make([]float32, cfg.NumParams()))
		for _, w := range append(tc.want, path) {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want it to contain %q", tc.name, err, w)
			}
		}
	}
	if err := ReadWeights(filepath.Join(t.TempDir(), "nope"), cfg, make([]float32, cfg.NumParams())); err == nil {
		t.Error("reading a missing file succeeded")
	}
}

// The config.json of Hugging Face's "gpt2" checkpoint.
const hfGPT2Config = `{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
}`

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := ReadConfig(write("gpt2.json", hfGPT2Config))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Preset("gpt2")
	if got != want {
		t.Errorf("gpt2 config.json read as %+v, want %+v", got, want)
	}
	bad := strings.Replace(hfGPT2Config, `"gelu_new"`, `"relu"`, 1)
	bad = strings.Replace(bad, `"n_embd": 768,`, ``, 1)
	_, err = ReadConfig(write("bad.json", bad))
	for _, w := range []string{`activation_function "relu"`, "n_embd is missing", "bad.json"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("bad config: %v, want it to mention %q", err, w)
		}
	}
	// Values Validate refuses are named by their config.json keys, not
	// by Config's Go fields.
	for _, tc := range []struct{ from, to, want string }{
		{`"n_head": 12,`, `"n_head": 5,`, "n_embd 768 is not a multiple of n_head 5"},
		{`"n_layer": 12,`, `"n_layer": 0,`, "n_layer is 0; it must be positive"},
		{`"layer_norm_epsilon": 1e-05,`, `"layer_norm_epsilon": -1,`, "layer_norm_epsilon is -1; it must be positive"},
		{`"vocab_size": 50257`, `"vocab_size": -3`, "vocab_size is -3"},
	} {
		in := strings.Replace(hfGPT2Config, tc.from, tc.to, 1)
		if in == hfGPT2Config {
			t.Fatalf("%q is not in the config", tc.from)
		}
		_, err := ReadConfig(write("v.json", in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || regexp.MustCompile(`\b(Dim|Heads|Layers|Vocab|Eps) =`).MatchString(err.Error()) {
			t.Errorf("%s: %v, want %q and no Go field names", tc.to, err, tc.want)
		}
	}
}
