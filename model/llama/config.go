package llama

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dszero/dszero/model"
)

// Family is one of the four Hugging Face decoder classes this package
// implements. They share one architecture and differ in five switches
// (Config.qkvBias, oBias, mlpBias, qkNorm and the sliding window).
type Family int

const (
	Llama   Family = iota // LlamaForCausalLM (also SmolLM, TinyLlama, ...)
	Qwen2                 // Qwen2ForCausalLM (Qwen1.5, Qwen2, Qwen2.5)
	Qwen3                 // Qwen3ForCausalLM
	Mistral               // MistralForCausalLM
)

var familyInfo = [...]struct{ modelType, arch, layer string }{
	Llama:   {"llama", "LlamaForCausalLM", "LlamaDecoderLayer"},
	Qwen2:   {"qwen2", "Qwen2ForCausalLM", "Qwen2DecoderLayer"},
	Qwen3:   {"qwen3", "Qwen3ForCausalLM", "Qwen3DecoderLayer"},
	Mistral: {"mistral", "MistralForCausalLM", "MistralDecoderLayer"},
}

// String is the config.json model_type: "llama", "qwen2", "qwen3", "mistral".
func (f Family) String() string {
	if f < 0 || int(f) >= len(familyInfo) {
		return fmt.Sprintf("Family(%d)", int(f))
	}
	return familyInfo[f].modelType
}

// Architecture is the config.json architectures entry, e.g. "LlamaForCausalLM".
func (f Family) Architecture() string { return familyInfo[f].arch }

// DecoderLayerClass is the transformers class of one decoder layer, e.g.
// "LlamaDecoderLayer": the name an FSDP transformer_layer_cls_to_wrap
// gives, and the class of each "model.layers.N" unit.
func (f Family) DecoderLayerClass() string { return familyInfo[f].layer }

// familyByModelType maps a model_type to its family.
func familyByModelType(mt string) (Family, bool) {
	for f, info := range familyInfo {
		if info.modelType == mt {
			return Family(f), true
		}
	}
	return 0, false
}

// The RoPE types (modeling_rope_utils.ROPE_INIT_FUNCTIONS) this package
// implements.
const (
	RopeDefault = "default" // inv_freq[i] = θ^(-2i/D)
	RopeLinear  = "linear"  // inv_freq / factor
	RopeDynamic = "dynamic" // NTK: θ grows only past max_position_embeddings; default while training within it
	RopeYarn    = "yarn"    // ramp between interpolated and extrapolated frequencies, cos/sin scaled
	RopeLlama3  = "llama3"  // Llama 3.1/3.2: long wavelengths / factor, a smooth band between
)

// Rope is the rotary embedding's configuration: config.json's rope_theta
// and rope_scaling (or transformers 5's rope_parameters).
type Rope struct {
	Type  string  // rope_type (legacy key "type"); "" means default
	Theta float64 // rope_theta, the base θ
	// Factor scales the context (linear, dynamic, yarn, llama3).
	Factor float64
	// LowFreqFactor and HighFreqFactor bound llama3's smoothed band.
	LowFreqFactor, HighFreqFactor float64
	// OriginalMaxPositions is original_max_position_embeddings: llama3's
	// old context; for yarn, when set, the factor becomes
	// max_position_embeddings / OriginalMaxPositions (transformers 5).
	OriginalMaxPositions int
	// AttentionFactor multiplies yarn's cos and sin; 0 derives it from
	// Factor (and Mscale, MscaleAllDim when both are set).
	AttentionFactor float64
	// BetaFast and BetaSlow bound yarn's ramp; 0 means 32 and 1.
	BetaFast, BetaSlow float64
	// Mscale and MscaleAllDim are yarn's DeepSeek-style attention factor
	// terms; 0 means absent.
	Mscale, MscaleAllDim float64
	// NoTruncate is yarn's truncate: false (the ramp's bounds are not
	// rounded to whole dimensions).
	NoTruncate bool
}

// Config is the shape of one model. The zero values of the optional
// fields are filled by WithDefaults; ReadConfig fills them from a
// config.json with the family's transformers defaults.
type Config struct {
	Family       Family
	Vocab        int // vocab_size: rows of embed_tokens (and lm_head)
	Hidden       int // hidden_size H
	Intermediate int // intermediate_size I: width of the SwiGLU MLP
	Layers       int // num_hidden_layers L
	Heads        int // num_attention_heads nH
	KVHeads      int // num_key_value_heads nKV (0: = Heads); query head j reads kv head j/(nH/nKV)
	HeadDim      int // head_dim D (0: Hidden/Heads); need not be Hidden/Heads
	MaxPositions int // max_position_embeddings (0: the family's default)
	Eps          float64
	Rope         Rope
	Tied         bool // tie_word_embeddings: the LM head is embed_tokens, no lm_head.weight
	// AttentionBias is attention_bias (Llama, Qwen3): biases on q, k, v
	// and o. Qwen2 always has q, k, v biases and none on o; Mistral none.
	AttentionBias bool
	// MLPBias is Llama's mlp_bias: biases on gate, up and down.
	MLPBias bool
	// SlidingWindow is the sliding_window in effect (Qwen2/3 only with
	// use_sliding_window): a query sees the keys within this many tokens
	// of it, itself included. 0 means full causal attention.
	SlidingWindow int
	// MaxWindowLayers (Qwen2/3): without LayerTypes, the layers from this
	// index on use the window.
	MaxWindowLayers int
	// LayerTypes (Qwen2/3) gives each layer "full_attention" or
	// "sliding_attention"; WithDefaults derives it from MaxWindowLayers.
	LayerTypes []string
	// InitializerRange is the standard deviation of the random init
	// (0: 0.02).
	InitializerRange float64
	// PadTokenID, when set, is embed_tokens' padding_idx: its row starts at
	// zero and gets no gradient from the embedding lookup.
	PadTokenID *int
	// BOSTokenID and EOSTokenIDs are written back to config.json and
	// generation_config.json; EOSList keeps eos_token_id a list.
	BOSTokenID  *int
	EOSTokenIDs []int
	EOSList     bool
	// DType is the checkpoint's torch_dtype: "float32", "bfloat16",
	// "float16", or "" when unknown.
	DType string
}

// Attention types of LayerTypes.
const (
	FullAttention    = "full_attention"
	SlidingAttention = "sliding_attention"
)

func ptr[T any](v T) *T { return &v }

// presets are named configurations with the shapes of real checkpoints
// (their config.json files on the Hugging Face Hub) and tiny ones for
// tests.
var presets = map[string]Config{
	"llama-3.2-1b": {Family: Llama, Vocab: 128256, Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8,
		HeadDim: 64, MaxPositions: 131072, Eps: 1e-5, Tied: true, BOSTokenID: ptr(128000), EOSTokenIDs: []int{128001},
		Rope:  Rope{Type: RopeLlama3, Theta: 500000, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		DType: "bfloat16"},
	"qwen2.5-0.5b": {Family: Qwen2, Vocab: 151936, Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2,
		MaxPositions: 32768, Eps: 1e-6, Rope: Rope{Theta: 1e6}, Tied: true, MaxWindowLayers: 24,
		BOSTokenID: ptr(151643), EOSTokenIDs: []int{151643}, DType: "bfloat16"},
	"qwen3-0.6b": {Family: Qwen3, Vocab: 151936, Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16, KVHeads: 8,
		HeadDim: 128, MaxPositions: 40960, Eps: 1e-6, Rope: Rope{Theta: 1e6}, Tied: true, MaxWindowLayers: 28,
		BOSTokenID: ptr(151643), EOSTokenIDs: []int{151645}, DType: "bfloat16"},
	"smollm2-135m": {Family: Llama, Vocab: 49152, Hidden: 576, Intermediate: 1536, Layers: 30, Heads: 9, KVHeads: 3,
		HeadDim: 64, MaxPositions: 8192, Eps: 1e-5, Rope: Rope{Theta: 100000}, Tied: true,
		InitializerRange: 0.041666666666666664, BOSTokenID: ptr(0), EOSTokenIDs: []int{0}, DType: "bfloat16"},
	"tiny-llama": {Family: Llama, Vocab: 256, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
		MaxPositions: 128, Eps: 1e-5, Rope: Rope{Type: RopeLlama3, Theta: 500000, Factor: 8, LowFreqFactor: 1,
			HighFreqFactor: 4, OriginalMaxPositions: 32}, BOSTokenID: ptr(1), EOSTokenIDs: []int{2}},
	"tiny-qwen2": {Family: Qwen2, Vocab: 256, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
		MaxPositions: 128, Eps: 1e-6, Rope: Rope{Theta: 1e6}, Tied: true, MaxWindowLayers: 2},
	"tiny-qwen3": {Family: Qwen3, Vocab: 256, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 32, MaxPositions: 128, Eps: 1e-6, Rope: Rope{Theta: 1e6}, Tied: true, MaxWindowLayers: 2},
	"tiny-mistral": {Family: Mistral, Vocab: 256, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 1,
		MaxPositions: 128, Eps: 1e-5, Rope: Rope{Theta: 10000}, SlidingWindow: 16},
}

// Preset returns the named configuration, with defaults applied.
func Preset(name string) (Config, error) {
	c, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("llama: unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	c.LayerTypes = slices.Clone(c.LayerTypes)
	c.EOSTokenIDs = slices.Clone(c.EOSTokenIDs)
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

// familyMaxPositions are the configuration classes' default
// max_position_embeddings.
var familyMaxPositions = [...]int{Llama: 2048, Qwen2: 32768, Qwen3: 32768, Mistral: 4096 * 32}

// WithDefaults fills the zero optional fields: KVHeads = Heads, HeadDim =
// Hidden/Heads, MaxPositions the family's default, Eps 1e-6, rope type
// default and θ 10000, InitializerRange 0.02, and Qwen2/3's LayerTypes
// from SlidingWindow and MaxWindowLayers (the __post_init__ rule:
// sliding from layer MaxWindowLayers on when a window is set).
func (c Config) WithDefaults() Config {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.MaxPositions == 0 && c.Family >= 0 && int(c.Family) < len(familyMaxPositions) {
		c.MaxPositions = familyMaxPositions[c.Family]
	}
	if c.Eps == 0 {
		c.Eps = 1e-6
	}
	if c.Rope.Type == "" {
		c.Rope.Type = RopeDefault
	}
	if c.Rope.Theta == 0 {
		c.Rope.Theta = 10000
	}
	if c.InitializerRange == 0 {
		c.InitializerRange = 0.02
	}
	if (c.Family == Qwen2 || c.Family == Qwen3) && c.LayerTypes == nil && c.Layers > 0 {
		c.LayerTypes = make([]string, c.Layers)
		for l := range c.LayerTypes {
			c.LayerTypes[l] = FullAttention
			if c.SlidingWindow > 0 && l >= c.MaxWindowLayers {
				c.LayerTypes[l] = SlidingAttention
			}
		}
	}
	return c
}

// Validate reports every problem with c (after WithDefaults).
func (c Config) Validate() error { return joinPrefixed("llama", c.problems()) }

// joinPrefixed joins errs, each prefixed.
func joinPrefixed(prefix string, errs []error) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s: %w", prefix, e)
	}
	return errors.Join(out...)
}

// problems lists what is wrong with c.
func (c Config) problems() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Family < 0 || int(c.Family) >= len(familyInfo) {
		bad("unknown Family %d", int(c.Family))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Vocab", c.Vocab}, {"Hidden", c.Hidden}, {"Intermediate", c.Intermediate}, {"Layers", c.Layers},
		{"Heads", c.Heads}, {"KVHeads", c.KVHeads}, {"HeadDim", c.HeadDim}, {"MaxPositions", c.MaxPositions}} {
		if f.v <= 0 {
			bad("%s = %d, must be > 0", f.name, f.v)
		}
	}
	if c.Heads > 0 && c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		bad("Heads = %d is not a multiple of KVHeads = %d (each key/value head serves Heads/KVHeads query heads)", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		bad("HeadDim = %d is odd; RoPE rotates the two halves of each head", c.HeadDim)
	}
	if !(c.Eps > 0) || math.IsInf(c.Eps, 0) {
		bad("Eps = %g, must be > 0", c.Eps)
	}
	if !(c.InitializerRange >= 0) || math.IsInf(c.InitializerRange, 0) {
		bad("InitializerRange = %g, must be >= 0", c.InitializerRange)
	}
	errs = append(errs, c.Rope.problems()...)
	if c.AttentionBias && c.Family != Llama && c.Family != Qwen3 {
		bad("AttentionBias is a llama/qwen3 setting; %v has fixed biases", c.Family)
	}
	if c.MLPBias && c.Family != Llama {
		bad("MLPBias is a llama setting, not %v", c.Family)
	}
	if c.SlidingWindow < 0 {
		bad("SlidingWindow = %d, must be >= 0", c.SlidingWindow)
	}
	if c.SlidingWindow > 0 && c.Family == Llama {
		bad("SlidingWindow is not a llama setting (LlamaForCausalLM has none; use mistral or qwen2)")
	}
	if c.LayerTypes != nil {
		if c.Family != Qwen2 && c.Family != Qwen3 {
			bad("LayerTypes is a qwen2/qwen3 setting, not %v", c.Family)
		}
		if len(c.LayerTypes) != c.Layers {
			bad("LayerTypes has %d entries for %d layers", len(c.LayerTypes), c.Layers)
		}
		for l, t := range c.LayerTypes {
			switch {
			case t == SlidingAttention && c.SlidingWindow == 0:
				bad("LayerTypes[%d] = %q, but no sliding window is in effect", l, t)
			case t != FullAttention && t != SlidingAttention:
				bad("LayerTypes[%d] = %q, want %q or %q", l, t, FullAttention, SlidingAttention)
			}
		}
	}
	if p := c.PadTokenID; p != nil && (*p < 0 || *p >= c.Vocab) {
		bad("PadTokenID = %d is outside the vocabulary [0, %d)", *p, c.Vocab)
	}
	switch c.DType {
	case "", "float32", "bfloat16", "float16":
	default:
		bad("DType = %q, want float32, bfloat16 or float16", c.DType)
	}
	return errs
}

func (r Rope) problems() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("rope_type %q: "+format, append([]any{r.Type}, a...)...))
	}
	if !(r.Theta > 0) || math.IsInf(r.Theta, 0) {
		bad("rope_theta = %g, must be > 0", r.Theta)
	}
	switch r.Type {
	case RopeDefault:
	case RopeLinear, RopeDynamic, RopeYarn, RopeLlama3:
		if !(r.Factor > 0) || math.IsInf(r.Factor, 0) {
			bad("factor = %g, must be > 0", r.Factor)
		}
	default:
		return []error{fmt.Errorf("rope_type %q is not implemented (want %s, %s, %s, %s or %s)",
			r.Type, RopeDefault, RopeLinear, RopeDynamic, RopeYarn, RopeLlama3)}
	}
	if r.Type == RopeLlama3 {
		if r.OriginalMaxPositions <= 0 {
			bad("original_max_position_embeddings = %d, must be > 0", r.OriginalMaxPositions)
		}
		if !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) {
			bad("low_freq_factor = %g and high_freq_factor = %g: need 0 < low < high", r.LowFreqFactor, r.HighFreqFactor)
		}
	}
	if r.Type == RopeYarn {
		if r.OriginalMaxPositions < 0 || r.BetaFast < 0 || r.BetaSlow < 0 || r.AttentionFactor < 0 {
			bad("original_max_position_embeddings, beta_fast, beta_slow and attention_factor must not be negative")
		}
	}
	return errs
}

// Window is layer l's sliding window (0: full causal attention).
func (c Config) Window(l int) int {
	switch c.Family {
	case Mistral:
		return c.SlidingWindow
	case Qwen2, Qwen3:
		if l < len(c.LayerTypes) && c.LayerTypes[l] == SlidingAttention {
			return c.SlidingWindow
		}
	}
	return 0
}

// The per-family switches.
func (c Config) qkvBias() bool { return c.Family == Qwen2 || c.AttentionBias }
func (c Config) oBias() bool   { return c.AttentionBias }
func (c Config) mlpBias() bool { return c.MLPBias }
func (c Config) qkNorm() bool  { return c.Family == Qwen3 }

// qDim and kvDim are the widths of the query and of the key (or value)
// projections: nH·D and nKV·D.
func (c Config) qDim() int  { return c.Heads * c.HeadDim }
func (c Config) kvDim() int { return c.KVHeads * c.HeadDim }

// Layout returns the flat-buffer layout: the parameters in
// LlamaForCausalLM's named_parameters order with their Hugging Face names,
// in units embeddings, model.layers.0 … model.layers.L-1, head. c must be
// valid.
//
//	unit 0 "embeddings"       model.embed_tokens.weight (V, H)
//	unit 1+l "model.layers.l" self_attn.q_proj.weight (nH·D, H), .bias (nH·D) if qkv bias,
//	                          self_attn.k_proj.weight (nKV·D, H), .bias,
//	                          self_attn.v_proj.weight (nKV·D, H), .bias,
//	                          self_attn.o_proj.weight (H, nH·D), .bias (H) if o bias,
//	                          self_attn.q_norm.weight (D), self_attn.k_norm.weight (D) (Qwen3),
//	                          mlp.gate_proj.weight (I, H), .bias, mlp.up_proj.weight (I, H), .bias,
//	                          mlp.down_proj.weight (H, I), .bias (H) if mlp bias,
//	                          input_layernorm.weight (H), post_attention_layernorm.weight (H)
//	unit L+1 "head"           model.norm.weight (H), lm_head.weight (V, H) unless tied;
//	                          tied: Borrows unit 0 (embed_tokens is the head)
//
// (each name under model.layers.l.). Init is HF's _init_weights: Linear
// and Embedding weights N(0, InitializerRange²), biases 0, RMSNorm
// weights 1 (and the padding row zero: Config.InitRange).
func (c Config) Layout() model.Layout {
	H, I, Q, KV, D := c.Hidden, c.Intermediate, c.qDim(), c.kvDim(), c.HeadDim
	normal := model.Init{Kind: model.InitNormal, Scale: c.InitializerRange}
	zeros := model.Init{Kind: model.InitZeros}
	ones := model.Init{Kind: model.InitOnes}
	var b model.LayoutBuilder
	linear := func(name string, bias bool, out, in int) {
		b.Param(name+".weight", normal, out, in)
		if bias {
			b.Param(name+".bias", zeros, out)
		}
	}
	b.Unit("embeddings")
	b.Param("model.embed_tokens.weight", normal, c.Vocab, H)
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.Unit(fmt.Sprintf("model.layers.%d", l))
		linear(p+"self_attn.q_proj", c.qkvBias(), Q, H)
		linear(p+"self_attn.k_proj", c.qkvBias(), KV, H)
		linear(p+"self_attn.v_proj", c.qkvBias(), KV, H)
		linear(p+"self_attn.o_proj", c.oBias(), H, Q)
		if c.qkNorm() {
			b.Param(p+"self_attn.q_norm.weight", ones, D)
			b.Param(p+"self_attn.k_norm.weight", ones, D)
		}
		linear(p+"mlp.gate_proj", c.mlpBias(), I, H)
		linear(p+"mlp.up_proj", c.mlpBias(), I, H)
		linear(p+"mlp.down_proj", c.mlpBias(), H, I)
		b.Param(p+"input_layernorm.weight", ones, H)
		b.Param(p+"post_attention_layernorm.weight", ones, H)
	}
	if c.Tied {
		b.Unit("head", 0)
	} else {
		b.Unit("head")
	}
	b.Param("model.norm.weight", ones, H)
	if !c.Tied {
		b.Param("lm_head.weight", normal, c.Vocab, H)
	}
	return b.Build()
}

// NumParams is the number of parameters (elements of the flat buffer).
func (c Config) NumParams() int {
	H, I, Q, KV := c.Hidden, c.Intermediate, c.qDim(), c.kvDim()
	layer := Q*H + 2*KV*H + H*Q + 3*I*H + 2*H
	if c.qkvBias() {
		layer += Q + 2*KV
	}
	if c.oBias() {
		layer += H
	}
	if c.qkNorm() {
		layer += 2 * c.HeadDim
	}
	if c.mlpBias() {
		layer += 2*I + H
	}
	n := c.Vocab*H + c.Layers*layer + H
	if !c.Tied {
		n += c.Vocab * H
	}
	return n
}

// InitRange writes elements [lo, lo+len(dst)) of the randomly initialised
// flat buffer into dst (see model.Layout.InitRange, which it follows) and
// zeroes the padding token's embedding row, as _init_weights does for an
// nn.Embedding with a padding_idx. Like Layout.InitRange the result does
// not depend on how the buffer is cut, so a stage-3 rank initialises only
// its partition.
func (c Config) InitRange(l *model.Layout, seed uint64, dst []float32, lo int) {
	l.InitRange(seed, dst, lo)
	if c.PadTokenID == nil {
		return
	}
	a := *c.PadTokenID * c.Hidden // the row within embed_tokens, spec 0 at offset 0
	a, b := max(a, lo), min(a+c.Hidden, lo+len(dst))
	if a < b {
		clear(dst[a-lo : b-lo])
	}
}

func (c Config) describe() string {
	return fmt.Sprintf("%v V=%d H=%d I=%d L=%d heads=%d/%d D=%d tied=%v", c.Family, c.Vocab, c.Hidden, c.Intermediate,
		c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Tied)
}
