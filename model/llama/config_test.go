package llama

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

func TestPresets(t *testing.T) {
	// Parameter counts of the Hugging Face checkpoints (tied heads).
	want := map[string]int{
		"llama-3.2-1b": 1235814400,
		"qwen2.5-0.5b": 494032768,
		"qwen3-0.6b":   596049920,
		"smollm2-135m": 134515008,
	}
	for _, name := range PresetNames() {
		cfg, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		l := cfg.Layout()
		if l.Numel != cfg.NumParams() {
			t.Errorf("%s: layout has %d elements, NumParams %d", name, l.Numel, cfg.NumParams())
		}
		if n, ok := want[name]; ok && cfg.NumParams() != n {
			t.Errorf("%s: %d parameters, want %d", name, cfg.NumParams(), n)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("presets missing: %v", want)
	}
	if _, err := Preset("llama-7b"); err == nil || !strings.Contains(err.Error(), "smollm2-135m") {
		t.Errorf("unknown preset error %v should list the known ones", err)
	}
}

// TestLayoutMatchesReference checks names, shapes and order against the
// reference's checkpoints, written in named_parameters order.
func TestLayoutMatchesReference(t *testing.T) {
	for _, dir := range []string{"packed", "qwen3", "mistral", "qwen2"} {
		cfg, err := ReadConfig(filepath.Join("testdata", dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := model.OpenSafetensors(filepath.Join("testdata", dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		type entry struct {
			Name  string
			Shape []int
		}
		var want, got []entry
		for _, ti := range f.Tensors {
			if cfg.Tied && ti.Name == "lm_head.weight" {
				continue // the stored duplicate of a tied head
			}
			want = append(want, entry{ti.Name, ti.Shape})
		}
		f.Close()
		for _, s := range cfg.Layout().Specs {
			got = append(got, entry{s.Name, s.Shape})
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: layout differs from named_parameters (-reference +ours):\n%s", dir, d)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, name := range []string{"tiny-llama", "tiny-qwen3"} {
		cfg, _ := Preset(name)
		l := cfg.Layout()
		var names []string
		next := 0
		for i, u := range l.Units {
			names = append(names, u.Name)
			if u.Offset != next || u.First > u.Last {
				t.Errorf("%s: unit %d %+v is not contiguous after %d", name, i, u, next)
			}
			for p := u.First; p <= u.Last; p++ {
				if l.Specs[p].Unit != i {
					t.Errorf("%s: %s is in unit %d, Specs says %d", name, l.Specs[p].Name, i, l.Specs[p].Unit)
				}
				if i >= 1 && i <= cfg.Layers && !strings.HasPrefix(l.Specs[p].Name, u.Name+".") {
					t.Errorf("%s: %s is in unit %s", name, l.Specs[p].Name, u.Name)
				}
			}
			next = u.Offset + u.Numel
		}
		want := []string{"embeddings", "model.layers.0", "model.layers.1", "head"}
		if d := cmp.Diff(want, names); d != "" || next != l.Numel {
			t.Errorf("%s: units (-want +got):\n%s", name, d)
		}
		var borrows []int
		if cfg.Tied {
			borrows = []int{0}
		}
		if head := l.Units[len(l.Units)-1]; !slices.Equal(head.Borrows, borrows) {
			t.Errorf("%s (tied %v): head borrows %v", name, cfg.Tied, head.Borrows)
		}
	}
	if got := Qwen3.DecoderLayerClass(); got != "Qwen3DecoderLayer" {
		t.Errorf("Qwen3 layer class %q", got)
	}
}

// TestInit checks _init_weights' rules: N(0, initializer_range) weights,
// zero biases, unit norms, a zero padding row, and that a partition's
// init equals the full init's slice.
func TestInit(t *testing.T) {
	cfg, _ := Preset("tiny-qwen2")
	cfg.PadTokenID = ptr(7)
	cfg.InitializerRange = 0.05
	l := cfg.Layout()
	full := make([]float32, l.Numel)
	cfg.InitRange(&l, 3, full, 0)
	for i, s := range l.Specs {
		v := l.View(full, i)
		switch {
		case strings.HasSuffix(s.Name, "norm.weight"):
			if slices.ContainsFunc(v, func(x float32) bool { return x != 1 }) {
				t.Errorf("%s is not all ones", s.Name)
			}
		case strings.HasSuffix(s.Name, ".bias"):
			if slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) {
				t.Errorf("%s is not all zeros", s.Name)
			}
		default:
			var ss float64
			for _, x := range v {
				ss += float64(x) * float64(x)
			}
			if std := math.Sqrt(ss / float64(len(v))); math.Abs(std-0.05) > 0.005 {
				t.Errorf("%s: std %.4f, want 0.05", s.Name, std)
			}
		}
	}
	pad := full[7*cfg.Hidden : 8*cfg.Hidden]
	if slices.ContainsFunc(pad, func(x float32) bool { return x != 0 }) {
		t.Error("the padding row is not zero")
	}
	for _, cut := range [][2]int{{0, 100}, {7*cfg.Hidden - 5, 8*cfg.Hidden + 3}, {7*cfg.Hidden + 10, 7*cfg.Hidden + 20}, {1000, l.Numel}} {
		part := make([]float32, cut[1]-cut[0])
		cfg.InitRange(&l, 3, part, cut[0])
		if !slices.Equal(part, full[cut[0]:cut[1]]) {
			t.Errorf("InitRange of [%d, %d) differs from the full init", cut[0], cut[1])
		}
	}
}

func TestReadConfigDefaults(t *testing.T) {
	base := `"vocab_size": 32, "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 8`
	for _, tc := range []struct {
		name, json string
		check      func(Config) string
	}{
		{"llama", `{"model_type": "llama", ` + base + `}`, func(c Config) string {
			return check(c.KVHeads == 8 && c.HeadDim == 8 && c.MaxPositions == 2048 && c.Eps == 1e-6 && !c.Tied &&
				c.Rope == Rope{Type: RopeDefault, Theta: 10000} && c.Window(0) == 0 && c.InitializerRange == 0.02)
		}},
		{"mistral without sliding_window", `{"model_type": "mistral", ` + base + `}`, func(c Config) string {
			return check(c.KVHeads == 8 && c.SlidingWindow == 4096 && c.Window(2) == 4096 && c.MaxPositions == 131072)
		}},
		{"mistral with a null window", `{"model_type": "mistral", "sliding_window": null, "num_key_value_heads": null, ` + base + `}`,
			func(c Config) string { return check(c.SlidingWindow == 0 && c.Window(0) == 0 && c.KVHeads == 8) }},
		{"qwen2 unused window", `{"model_type": "qwen2", "sliding_window": 4096, "max_window_layers": 1, ` + base + `}`,
			func(c Config) string {
				return check(c.SlidingWindow == 0 && c.Window(2) == 0 && c.qkvBias() && !c.oBias())
			}},
		{"qwen2 window from max_window_layers", `{"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 5, "max_window_layers": 1, ` + base + `}`,
			func(c Config) string { return check(c.Window(0) == 0 && c.Window(1) == 5 && c.Window(2) == 5) }},
		{"qwen3 layer_types", `{"model_type": "qwen3", "use_sliding_window": true, "sliding_window": 5, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"], ` + base + `}`,
			func(c Config) string {
				return check(c.Window(0) == 5 && c.Window(1) == 0 && c.HeadDim == 128 && c.qkNorm())
			}},
		{"eos list and tokens", `{"model_type": "llama", "eos_token_id": [5, 6], "bos_token_id": 4, "pad_token_id": 0, "torch_dtype": "bfloat16", ` + base + `}`,
			func(c Config) string {
				return check(c.EOSList && slices.Equal(c.EOSTokenIDs, []int{5, 6}) && *c.BOSTokenID == 4 && *c.PadTokenID == 0 && c.DType == "bfloat16")
			}},
		{"dtype wins over torch_dtype", `{"model_type": "llama", "dtype": "float16", "torch_dtype": "float32", ` + base + `}`,
			func(c Config) string { return check(c.DType == "float16") }},
	} {
		c, err := ParseConfig(tc.name, []byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if msg := tc.check(c); msg != "" {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

func check(ok bool) string {
	if ok {
		return ""
	}
	return "mismatch"
}

// TestReadConfigRope reads the RoPE forms: rope_theta with rope_scaling
// (rope_type or the legacy type), transformers 5's rope_parameters, and
// rope_parameters per layer type.
func TestReadConfigRope(t *testing.T) {
	base := `"model_type": "llama", "vocab_size": 32, "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4096`
	llama3 := Rope{Type: RopeLlama3, Theta: 500000, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 512}
	for _, tc := range []struct {
		name, rope string
		want       Rope
	}{
		{"rope_scaling", `"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}`, llama3},
		{"legacy type", `"rope_theta": 10000, "rope_scaling": {"type": "linear", "factor": 2}`, Rope{Type: RopeLinear, Theta: 10000, Factor: 2}},
		{"rope_parameters", `"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}`, llama3},
		{"rope_parameters with top-level theta", `"rope_theta": 1000000.0, "rope_parameters": {"rope_type": "default"}`, Rope{Type: RopeDefault, Theta: 1e6}},
		{"both forms agreeing", `"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}`, llama3},
		{"per layer type", `"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}}`, Rope{Type: RopeDefault, Theta: 1000}},
		{"yarn", `"rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 16, "mscale": 0.7, "mscale_all_dim": 1.0, "truncate": false}`, Rope{Type: RopeYarn, Theta: 10000, Factor: 4, BetaFast: 16, Mscale: 0.7, MscaleAllDim: 1, NoTruncate: true}},
		{"null scaling", `"rope_theta": 100000, "rope_scaling": null`, Rope{Type: RopeDefault, Theta: 100000}},
	} {
		c, err := ParseConfig(tc.name, []byte("{"+base+", "+tc.rope+"}"))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if d := cmp.Diff(tc.want, c.Rope); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestReadConfigErrors(t *testing.T) {
	base := `"vocab_size": 32, "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4`
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"not json", `{"model_type": `, []string{"not a JSON object"}},
		{"no model_type", `{` + base + `}`, []string{"model_type is missing"}},
		{"gpt2", `{"model_type": "gpt2", ` + base + `}`, []string{`model_type "gpt2" is not implemented`}},
		{"missing shape keys", `{"model_type": "llama", "vocab_size": 32}`, []string{"hidden_size: missing", "intermediate_size: missing", "num_hidden_layers: missing", "num_attention_heads: missing"}},
		{"classifier", `{"model_type": "llama", "architectures": ["LlamaForSequenceClassification"], ` + base + `}`, []string{`architectures: "LlamaForSequenceClassification": only LlamaForCausalLM`}},
		{"gelu", `{"model_type": "llama", "hidden_act": "gelu", ` + base + `}`, []string{`hidden_act: "gelu" is not implemented`}},
		{"partial rotary", `{"model_type": "llama", "partial_rotary_factor": 0.5, ` + base + `}`, []string{"partial_rotary_factor: 0.5"}},
		{"dropout", `{"model_type": "qwen2", "attention_dropout": 0.1, ` + base + `}`, []string{"attention_dropout: 0.1"}},
		{"longrope", `{"model_type": "llama", "rope_scaling": {"rope_type": "longrope", "short_factor": [1], "long_factor": [1]}, ` + base + `}`, []string{`rope_type "longrope" is not implemented`}},
		{"llama3 without its keys", `{"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, ` + base + `}`, []string{"original_max_position_embeddings = 0", "low_freq_factor"}},
		{"linear without factor", `{"model_type": "llama", "rope_scaling": {"type": "linear"}, ` + base + `}`, []string{"factor = 0"}},
		{"kv heads", `{"model_type": "llama", "num_key_value_heads": 3, ` + base + `}`, []string{"Heads = 4 is not a multiple of KVHeads = 3"}},
		{"odd head_dim", `{"model_type": "llama", "head_dim": 7, ` + base + `}`, []string{"HeadDim = 7 is odd"}},
		{"quantized", `{"model_type": "llama", "quantization_config": {"quant_method": "gptq"}, ` + base + `}`, []string{"quantization_config"}},
		{"bad types", `{"model_type": "llama", "vocab_size": "big", "hidden_size": 64.5, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": "yes"}`,
			[]string{`vocab_size: "big" is not an integer`, "hidden_size: 64.5 is not an integer", `tie_word_embeddings: "yes" is not true or false`}},
		{"pad outside", `{"model_type": "llama", "pad_token_id": 32, ` + base + `}`, []string{"PadTokenID = 32 is outside the vocabulary"}},
		{"bad dtype", `{"model_type": "llama", "torch_dtype": "float64", ` + base + `}`, []string{`torch_dtype: "float64"`}},
		{"rope forms disagree", `{"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, ` + base + `}`, []string{"rope_scaling: disagrees with rope_parameters"}},
		{"rope per layer type differs", `{"model_type": "qwen3", "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}, ` + base + `}`, []string{"different RoPE per layer type"}},
		{"sliding layer without window", `{"model_type": "qwen2", "layer_types": ["sliding_attention", "full_attention"], ` + base + `}`, []string{`LayerTypes[0] = "sliding_attention", but no sliding window`}},
		{"mrope", `{"model_type": "qwen2", "use_mrope": true, ` + base + `}`, []string{"use_mrope"}},
	} {
		_, err := ParseConfig("dir/config.json", []byte(tc.json))
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.Contains(line, "dir/config.json") {
				t.Errorf("%s: error line %q does not name the file", tc.name, line)
			}
		}
	}
	if _, err := ReadConfig("testdata/no/such/config.json"); err == nil {
		t.Error("ReadConfig of a missing file succeeded")
	}
}

// TestConfigRoundTrip writes each case's and each preset's config as
// config.json and reads it back.
func TestConfigRoundTrip(t *testing.T) {
	var cfgs []Config
	for _, pc := range parityCases {
		c, err := ReadConfig(filepath.Join("testdata", pc.dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	for _, name := range PresetNames() {
		c, _ := Preset(name)
		cfgs = append(cfgs, c)
	}
	yarn := cfgs[0]
	yarn.Rope = Rope{Type: RopeYarn, Theta: 10000, Factor: 8, OriginalMaxPositions: 64, AttentionFactor: 0.9, BetaFast: 16, BetaSlow: 2, Mscale: 1, MscaleAllDim: 0.5, NoTruncate: true}
	cfgs = append(cfgs, yarn)
	dir := t.TempDir()
	for i, c := range cfgs {
		path := filepath.Join(dir, fmt.Sprintf("config%d.json", i))
		c.DType = "bfloat16"
		if err := WriteConfig(path, c, c.DType); err != nil {
			t.Fatal(err)
		}
		got, err := ReadConfig(path)
		if err != nil {
			b, _ := os.ReadFile(path)
			t.Fatalf("%v\n%s", err, b)
		}
		if d := cmp.Diff(c, got); d != "" {
			t.Errorf("config %d (%v) after a round trip (-written +read):\n%s", i, c.Family, d)
		}
	}
}

// TestRealConfigsMatchPresets reads the published config.json of each real
// preset's checkpoint (testdata/hf_configs) and compares it with the
// preset.
func TestRealConfigsMatchPresets(t *testing.T) {
	for _, name := range []string{"llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "smollm2-135m"} {
		got, err := ReadConfig(filepath.Join("testdata", "hf_configs", name+".json"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want, _ := Preset(name)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: config.json reads differently from the preset (-preset +file):\n%s", name, d)
		}
	}
}
