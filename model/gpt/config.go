package gpt

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dszero/dszero/model"
)

// Config is the shape of a GPT-2 model.
type Config struct {
	Vocab   int     // V: vocabulary size
	Context int     // maximum sequence length: the rows of wpe
	Dim     int     // C: model width (d_model)
	Heads   int     // NH: attention heads; Dim % Heads == 0, head size HS = C/NH
	Layers  int     // L: transformer blocks
	MLP     int     // M: hidden width of each block's MLP; 0 means 4*C
	Tied    bool    // the LM head reuses wte (no lm_head.weight parameter)
	Eps     float32 // LayerNorm epsilon; 0 means 1e-5
}

// presets are the named configurations. "tiny" is exactly the reference
// harness's TinyGPT; "small" is a default for byte-level text; the gpt2*
// presets are OpenAI's GPT-2 sizes (Hugging Face gpt2, gpt2-medium, ...).
var presets = map[string]Config{
	"tiny":        {Vocab: 64, Context: 32, Dim: 64, Heads: 4, Layers: 2, MLP: 256},
	"small":       {Vocab: 256, Context: 128, Dim: 128, Heads: 4, Layers: 4},
	"gpt2":        {Vocab: 50257, Context: 1024, Dim: 768, Heads: 12, Layers: 12, Tied: true},
	"gpt2-medium": {Vocab: 50257, Context: 1024, Dim: 1024, Heads: 16, Layers: 24, Tied: true},
	"gpt2-large":  {Vocab: 50257, Context: 1024, Dim: 1280, Heads: 20, Layers: 36, Tied: true},
	"gpt2-xl":     {Vocab: 50257, Context: 1024, Dim: 1600, Heads: 25, Layers: 48, Tied: true},
	// gpt2s-untied is the shape of the performance anchor in
	// shared/reference/perf: GPT-2 small with a padded vocabulary, a
	// 256-token context and an untied head (162,519,552 parameters).
	"gpt2s-untied": {Vocab: 50304, Context: 256, Dim: 768, Heads: 12, Layers: 12},
}

// Preset returns the named configuration, with defaults applied.
func Preset(name string) (Config, error) {
	c, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("gpt: unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return c.WithDefaults(), nil
}

// PresetNames lists the preset names in sorted order.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// DefaultEps is GPT-2's LayerNorm epsilon.
const DefaultEps = 1e-5

// WithDefaults fills MLP (4*Dim) and Eps (1e-5) when they are zero.
func (c Config) WithDefaults() Config {
	if c.MLP == 0 {
		c.MLP = 4 * c.Dim
	}
	if c.Eps == 0 {
		c.Eps = DefaultEps
	}
	return c
}

// Validate reports every problem with c (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("gpt: %s = %d, must be > 0", name, v))
		}
	}
	pos("Vocab", c.Vocab)
	pos("Context", c.Context)
	pos("Dim", c.Dim)
	pos("Heads", c.Heads)
	pos("Layers", c.Layers)
	pos("MLP", c.MLP)
	if c.Dim > 0 && c.Heads > 0 && c.Dim%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("gpt: Dim = %d is not a multiple of Heads = %d", c.Dim, c.Heads))
	}
	if !(c.Eps > 0) || math.IsInf(float64(c.Eps), 0) {
		errs = append(errs, fmt.Errorf("gpt: Eps = %g, must be > 0", c.Eps))
	}
	return errors.Join(errs...)
}

// Layout returns the flat-buffer layout: the parameters in the harness
// TinyGPT's named_parameters order (DeepSpeed's flattening order), in
// units embeddings, blocks.0 ... blocks.L-1, head. c must be valid.
//
//	unit 0 "embeddings"  wte.weight (V, C), wpe.weight (Context, C)
//	unit 1+l "blocks.l"  ln1.weight (C), ln1.bias (C),
//	                     attn.qkv.weight (3C, C), attn.qkv.bias (3C),
//	                     attn.proj.weight (C, C), attn.proj.bias (C),
//	                     ln2.weight (C), ln2.bias (C),
//	                     mlp.fc.weight (M, C), mlp.fc.bias (M),
//	                     mlp.proj.weight (C, M), mlp.proj.bias (C)
//	unit L+1 "head"      ln_f.weight (C), ln_f.bias (C), lm_head.weight (V, C) unless tied;
//	                     tied: Borrows unit 0 (wte is the head)
//
// Init: LayerNorm weights 1, biases 0, attn.proj and mlp.proj weights
// N(0, 0.02/sqrt(2L)), every other weight N(0, 0.02), as GPT-2 and the
// harness do.
func (c Config) Layout() model.Layout {
	C, M := c.Dim, c.MLP
	normal := model.Init{Kind: model.InitNormal, Scale: 0.02}
	projInit := model.Init{Kind: model.InitNormal, Scale: 0.02 / math.Sqrt(2*float64(c.Layers))}
	ones := model.Init{Kind: model.InitOnes}
	zeros := model.Init{Kind: model.InitZeros}

	var b model.LayoutBuilder
	b.Unit("embeddings")
	b.Param("wte.weight", normal, c.Vocab, C)
	b.Param("wpe.weight", normal, c.Context, C)
	for l := range c.Layers {
		p := fmt.Sprintf("blocks.%d.", l)
		b.Unit(fmt.Sprintf("blocks.%d", l))
		b.Param(p+"ln1.weight", ones, C)
		b.Param(p+"ln1.bias", zeros, C)
		b.Param(p+"attn.qkv.weight", normal, 3*C, C)
		b.Param(p+"attn.qkv.bias", zeros, 3*C)
		b.Param(p+"attn.proj.weight", projInit, C, C)
		b.Param(p+"attn.proj.bias", zeros, C)
		b.Param(p+"ln2.weight", ones, C)
		b.Param(p+"ln2.bias", zeros, C)
		b.Param(p+"mlp.fc.weight", normal, M, C)
		b.Param(p+"mlp.fc.bias", zeros, M)
		b.Param(p+"mlp.proj.weight", projInit, C, M)
		b.Param(p+"mlp.proj.bias", zeros, C)
	}
	if c.Tied {
		b.Unit("head", 0)
	} else {
		b.Unit("head")
	}
	b.Param("ln_f.weight", ones, C)
	b.Param("ln_f.bias", zeros, C)
	if !c.Tied {
		b.Param("lm_head.weight", normal, c.Vocab, C)
	}
	return b.Build()
}

// NumParams is the number of parameters (elements of the flat buffer).
func (c Config) NumParams() int {
	C, M := c.Dim, c.MLP
	n := c.Vocab*C + c.Context*C + c.Layers*(2*C+3*C*C+3*C+C*C+C+2*C+M*C+M+C*M+C) + 2*C
	if !c.Tied {
		n += c.Vocab * C
	}
	return n
}

// numBlockParams is the number of tensors per block in the layout.
const numBlockParams = 12
