package gpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/dszero/dszero/model"
)

// Weights on disk. Two naming conventions are understood:
//
//   - canonical: our names, which are the harness TinyGPT's
//     named_parameters (gpt_init.safetensors): wte.weight,
//     blocks.0.ln1.weight, ..., lm_head.weight; every weight in PyTorch
//     Linear layout (out, in).
//   - Hugging Face GPT-2 (GPT2LMHeadModel): an optional "transformer."
//     prefix, h.{i}.ln_1/ln_2, h.{i}.attn.c_attn, attn.c_proj,
//     mlp.c_fc, mlp.c_proj, ln_f, wte, wpe, and lm_head.weight only when
//     untied. c_attn, c_proj, c_fc and mlp.c_proj weights are Conv1D,
//     stored (in, out): the transpose of ours. The attn.bias and
//     attn.masked_bias buffers (causal masks) are ignored.

// hfBlockNames maps a canonical block tensor suffix to its Hugging Face
// suffix and whether the stored weight is transposed.
var hfBlockNames = map[string]struct {
	name       string
	transposed bool
}{
	"ln1.weight":       {"ln_1.weight", false},
	"ln1.bias":         {"ln_1.bias", false},
	"attn.qkv.weight":  {"attn.c_attn.weight", true},
	"attn.qkv.bias":    {"attn.c_attn.bias", false},
	"attn.proj.weight": {"attn.c_proj.weight", true},
	"attn.proj.bias":   {"attn.c_proj.bias", false},
	"ln2.weight":       {"ln_2.weight", false},
	"ln2.bias":         {"ln_2.bias", false},
	"mlp.fc.weight":    {"mlp.c_fc.weight", true},
	"mlp.fc.bias":      {"mlp.c_fc.bias", false},
	"mlp.proj.weight":  {"mlp.c_proj.weight", true},
	"mlp.proj.bias":    {"mlp.c_proj.bias", false},
}

// HFName returns the Hugging Face name of a canonical tensor name and
// whether Hugging Face stores it transposed.
func HFName(canonical string) (string, bool) {
	if rest, ok := strings.CutPrefix(canonical, "blocks."); ok {
		idx, suffix, _ := strings.Cut(rest, ".")
		if n, ok := hfBlockNames[suffix]; ok {
			return "h." + idx + "." + n.name, n.transposed
		}
	}
	return canonical, false
}

// hfBuffer matches the causal-mask buffers old GPT-2 checkpoints carry.
var hfBuffer = regexp.MustCompile(`^h\.\d+\.attn\.(bias|masked_bias)$`)

func describe(c Config) string {
	return fmt.Sprintf("V=%d context=%d C=%d heads=%d L=%d M=%d tied=%v", c.Vocab, c.Context, c.Dim, c.Heads, c.Layers, c.MLP, c.Tied)
}

// WriteWeights writes params (cfg's layout) with canonical names, in
// flat-buffer order, like the harness's gpt_init.safetensors.
func WriteWeights(path string, cfg Config, params []float32) error {
	return writeWeights(path, cfg, params, false)
}

// WriteHF writes params with Hugging Face GPT-2 names (no prefix),
// transposing the Conv1D weights; lm_head.weight only when untied.
func WriteHF(path string, cfg Config, params []float32) error {
	return writeWeights(path, cfg, params, true)
}

func writeWeights(path string, cfg Config, params []float32, hf bool) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	l := cfg.Layout()
	if len(params) != l.Numel {
		return fmt.Errorf("gpt: %s: parameter buffer has %d elements, the model %d", path, len(params), l.Numel)
	}
	ts := make([]model.Tensor, len(l.Specs))
	for i, s := range l.Specs {
		t := model.Tensor{Name: s.Name, Shape: s.Shape, Data: l.View(params, i)}
		if hf {
			name, tr := HFName(s.Name)
			t.Name, t.Transpose = name, tr
			if tr {
				t.Shape = []int{s.Shape[1], s.Shape[0]}
			}
		}
		ts[i] = t
	}
	meta := map[string]string{"format": "pt"}
	if err := model.WriteSafetensors(path, ts, meta); err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	return nil
}

// hfConfig is the part of a Hugging Face GPT-2 config.json we read.
type hfConfig struct {
	ModelType               string       `json:"model_type,omitempty"`
	Architectures           []string     `json:"architectures,omitempty"`
	VocabSize               *int         `json:"vocab_size"`
	NPositions              *int         `json:"n_positions"`
	NCtx                    *int         `json:"n_ctx,omitempty"`
	NEmbd                   *int         `json:"n_embd"`
	NLayer                  *int         `json:"n_layer"`
	NHead                   *int         `json:"n_head"`
	NInner                  *int         `json:"n_inner"`
	ActivationFunction      *string      `json:"activation_function,omitempty"`
	LayerNormEpsilon        *json.Number `json:"layer_norm_epsilon,omitempty"`
	TieWordEmbeddings       *bool        `json:"tie_word_embeddings,omitempty"`
	ScaleAttnWeights        *bool        `json:"scale_attn_weights,omitempty"`
	ScaleAttnByInverseLayer *bool        `json:"scale_attn_by_inverse_layer_idx,omitempty"`
	TorchDtype              string       `json:"torch_dtype,omitempty"`
}

// ReadConfig reads a Hugging Face GPT-2 config.json. Missing
// n_inner means 4*n_embd, missing tie_word_embeddings means tied (the
// Hugging Face default), missing layer_norm_epsilon 1e-5. Settings this
// model does not implement are errors.
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("gpt: %w", err)
	}
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return Config{}, fmt.Errorf("gpt: %s: %w", path, err)
	}
	var errs []error
	req := func(key string, v *int) int {
		if v == nil {
			errs = append(errs, fmt.Errorf("gpt: %s: %s is missing", path, key))
			return 0
		}
		return *v
	}
	c := Config{
		Vocab:   req("vocab_size", h.VocabSize),
		Context: req("n_positions", h.NPositions),
		Dim:     req("n_embd", h.NEmbd),
		Heads:   req("n_head", h.NHead),
		Layers:  req("n_layer", h.NLayer),
		Tied:    h.TieWordEmbeddings == nil || *h.TieWordEmbeddings,
	}
	if h.NInner != nil {
		c.MLP = *h.NInner
	}
	if h.LayerNormEpsilon != nil {
		eps, err := strconv.ParseFloat(h.LayerNormEpsilon.String(), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("gpt: %s: layer_norm_epsilon: %w", path, err))
		}
		c.Eps = float32(eps)
	}
	if h.ModelType != "" && h.ModelType != "gpt2" {
		errs = append(errs, fmt.Errorf("gpt: %s: model_type %q, want \"gpt2\"", path, h.ModelType))
	}
	if a := h.ActivationFunction; a != nil && *a != "gelu_new" && *a != "gelu_pytorch_tanh" {
		errs = append(errs, fmt.Errorf("gpt: %s: activation_function %q is not implemented (only the tanh GELU: \"gelu_new\", \"gelu_pytorch_tanh\")", path, *a))
	}
	if h.ScaleAttnWeights != nil && !*h.ScaleAttnWeights {
		errs = append(errs, fmt.Errorf("gpt: %s: scale_attn_weights false is not implemented", path))
	}
	if h.ScaleAttnByInverseLayer != nil && *h.ScaleAttnByInverseLayer {
		errs = append(errs, fmt.Errorf("gpt: %s: scale_attn_by_inverse_layer_idx true is not implemented", path))
	}
	// The checks of Validate, in config.json's names.
	for _, k := range []struct {
		key string
		v   *int
	}{{"vocab_size", h.VocabSize}, {"n_positions", h.NPositions}, {"n_embd", h.NEmbd}, {"n_head", h.NHead}, {"n_layer", h.NLayer}} {
		if k.v != nil && *k.v <= 0 {
			errs = append(errs, fmt.Errorf("gpt: %s: %s is %d; it must be positive", path, k.key, *k.v))
		}
	}
	if h.NInner != nil && *h.NInner < 0 {
		errs = append(errs, fmt.Errorf("gpt: %s: n_inner is %d; it must be positive (or null for 4 × n_embd)", path, *h.NInner))
	}
	if c.Dim > 0 && c.Heads > 0 && c.Dim%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("gpt: %s: n_embd %d is not a multiple of n_head %d: each attention head takes n_embd / n_head features", path, c.Dim, c.Heads))
	}
	if h.LayerNormEpsilon != nil && !(c.Eps > 0) {
		errs = append(errs, fmt.Errorf("gpt: %s: layer_norm_epsilon is %v; it must be positive (GPT-2 uses 1e-5)", path, h.LayerNormEpsilon))
	}
	if len(errs) == 0 {
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("gpt: %s: %w", path, err))
		}
	}
	return c, errors.Join(errs...)
}

// WriteConfig writes cfg as a Hugging Face GPT-2 config.json, for
// float32 weights.
func WriteConfig(path string, cfg Config) error { return WriteConfigDType(path, cfg, "float32") }

// WriteConfigDType is WriteConfig for weights stored as torchDtype, as
// transformers' torch_dtype names it: "float32", "bfloat16", "float16".
func WriteConfigDType(path string, cfg Config, torchDtype string) error {
	cfg = cfg.WithDefaults()
	eps := json.Number(strconv.FormatFloat(float64(cfg.Eps), 'g', -1, 32))
	act := "gelu_new"
	h := hfConfig{
		ModelType: "gpt2", Architectures: []string{"GPT2LMHeadModel"},
		VocabSize: &cfg.Vocab, NPositions: &cfg.Context, NCtx: &cfg.Context,
		NEmbd: &cfg.Dim, NLayer: &cfg.Layers, NHead: &cfg.Heads,
		ActivationFunction: &act, LayerNormEpsilon: &eps, TieWordEmbeddings: &cfg.Tied,
		TorchDtype: torchDtype,
	}
	if cfg.MLP != 4*cfg.Dim {
		h.NInner = &cfg.MLP
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// SaveDir writes dir/config.json and dir/model.safetensors in Hugging
// Face GPT-2 layout, creating dir.
func SaveDir(dir string, cfg Config, params []float32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	if err := WriteHF(filepath.Join(dir, "model.safetensors"), cfg, params); err != nil {
		return err
	}
	return WriteConfig(filepath.Join(dir, "config.json"), cfg)
}

// ReadDir reads dir/config.json and dir/model.safetensors into a new flat
// buffer.
func ReadDir(dir string) (Config, []float32, error) {
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, nil, err
	}
	params := make([]float32, cfg.NumParams())
	if err := ReadWeights(filepath.Join(dir, "model.safetensors"), cfg, params); err != nil {
		return Config{}, nil, err
	}
	return cfg, params, nil
}

// LoadDir reads a Hugging Face GPT-2 directory and returns a model bound
// to the loaded parameters (Params) without a gradient buffer: Bind
// m.Params() with one to train.
func LoadDir(dir string, opt Options) (*Model, error) {
	cfg, params, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(cfg, opt)
	if err != nil {
		return nil, err
	}
	if err := m.Bind(params, nil); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// SaveDir writes the bound parameters to dir in Hugging Face GPT-2 layout.
func (m *Model) SaveDir(dir string) error {
	if m.params == nil {
		return errors.New("gpt: SaveDir before Bind")
	}
	return SaveDir(dir, m.cfg, m.params)
}
