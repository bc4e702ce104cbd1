package llama

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Reading and writing a Hugging Face config.json for model_type llama,
// qwen2, qwen3 or mistral. A key a config leaves out takes the default of
// the family's configuration class (configuration_llama.py, …_qwen2.py,
// …_qwen3.py, …_mistral.py); settings this package does not implement
// are errors that name the file and the key, never silently dropped.

// jsonFields reads typed values out of a JSON object, collecting one error
// per bad key.
type jsonFields struct {
	path string
	ctx  string // "" or "rope_scaling." for nested objects
	m    map[string]json.RawMessage
	errs *[]error
}

func (f jsonFields) bad(key, format string, a ...any) {
	*f.errs = append(*f.errs, fmt.Errorf("llama: %s: %s%s: "+format, append([]any{f.path, f.ctx, key}, a...)...))
}

// raw returns the key's value and whether it is present and not null.
func (f jsonFields) raw(key string) (json.RawMessage, bool) {
	v, ok := f.m[key]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, false
	}
	return v, true
}

func (f jsonFields) has(key string) bool { _, ok := f.raw(key); return ok }

func (f jsonFields) float(key string, def float64) float64 {
	v, ok := f.raw(key)
	if !ok {
		return def
	}
	var x float64
	if err := json.Unmarshal(v, &x); err != nil {
		f.bad(key, "%s is not a number", v)
		return def
	}
	return x
}

func (f jsonFields) int(key string, def int) int {
	v, ok := f.raw(key)
	if !ok {
		return def
	}
	var x float64
	if err := json.Unmarshal(v, &x); err != nil || x != float64(int(x)) {
		f.bad(key, "%s is not an integer", v)
		return def
	}
	return int(x)
}

// optInt is an integer key that may be absent or null.
func (f jsonFields) optInt(key string) *int {
	if !f.has(key) {
		return nil
	}
	v := f.int(key, 0)
	return &v
}

func (f jsonFields) bool(key string, def bool) bool {
	v, ok := f.raw(key)
	if !ok {
		return def
	}
	var x bool
	if err := json.Unmarshal(v, &x); err != nil {
		f.bad(key, "%s is not true or false", v)
		return def
	}
	return x
}

func (f jsonFields) str(key, def string) string {
	v, ok := f.raw(key)
	if !ok {
		return def
	}
	var x string
	if err := json.Unmarshal(v, &x); err != nil {
		f.bad(key, "%s is not a string", v)
		return def
	}
	return x
}

func (f jsonFields) object(key string) (map[string]json.RawMessage, bool) {
	v, ok := f.raw(key)
	if !ok {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		f.bad(key, "%s is not an object", v)
		return nil, false
	}
	return m, true
}

// ReadConfig reads a Hugging Face config.json of a LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM or MistralForCausalLM. All problems
// are reported together, each naming the file and the key.
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig parses the content of a config.json; path names it in
// errors.
func ParseConfig(path string, b []byte) (Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return Config{}, fmt.Errorf("llama: %s: not a JSON object: %w", path, err)
	}
	var errs []error
	f := jsonFields{path: path, m: m, errs: &errs}
	mt := f.str("model_type", "")
	fam, ok := familyByModelType(mt)
	if !ok {
		if mt == "" {
			return Config{}, fmt.Errorf("llama: %s: model_type is missing (want llama, qwen2, qwen3 or mistral)", path)
		}
		return Config{}, fmt.Errorf("llama: %s: model_type %q is not implemented (want llama, qwen2, qwen3 or mistral)", path, mt)
	}
	if v, ok := f.raw("architectures"); ok {
		var archs []string
		if err := json.Unmarshal(v, &archs); err != nil {
			f.bad("architectures", "%s is not a list of class names", v)
		}
		for _, a := range archs {
			if a != fam.Architecture() {
				f.bad("architectures", "%q: only %s is implemented for model_type %q", a, fam.Architecture(), mt)
			}
		}
	}
	for _, key := range []string{"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"} {
		if !f.has(key) {
			f.bad(key, "missing")
		}
	}
	c := Config{
		Family:           fam,
		Vocab:            f.int("vocab_size", 0),
		Hidden:           f.int("hidden_size", 0),
		Intermediate:     f.int("intermediate_size", 0),
		Layers:           f.int("num_hidden_layers", 0),
		Heads:            f.int("num_attention_heads", 0),
		MaxPositions:     f.int("max_position_embeddings", familyMaxPositions[fam]),
		Eps:              f.float("rms_norm_eps", 1e-6),
		Tied:             f.bool("tie_word_embeddings", false),
		InitializerRange: f.float("initializer_range", 0.02),
		PadTokenID:       f.optInt("pad_token_id"),
		BOSTokenID:       f.optInt("bos_token_id"),
	}
	// A null num_key_value_heads or head_dim means the derived value (0
	// here, filled by WithDefaults); an absent one the class's default.
	kvDefault, headDefault := 0, 0
	if _, present := m["num_key_value_heads"]; !present && fam == Mistral {
		kvDefault = 8
	}
	if _, present := m["head_dim"]; !present && fam == Qwen3 {
		headDefault = 128
	}
	c.KVHeads = f.int("num_key_value_heads", kvDefault)
	c.HeadDim = f.int("head_dim", headDefault)
	if v, ok := f.raw("eos_token_id"); ok {
		var one int
		if json.Unmarshal(v, &one) == nil {
			c.EOSTokenIDs = []int{one}
		} else if json.Unmarshal(v, &c.EOSTokenIDs) == nil {
			c.EOSList = true
		} else {
			f.bad("eos_token_id", "%s is not an integer or a list of integers", v)
		}
	}
	if act := f.str("hidden_act", "silu"); act != "silu" && act != "swish" {
		f.bad("hidden_act", "%q is not implemented (the SwiGLU MLP takes silu)", act)
	}
	if p := f.float("partial_rotary_factor", 1); p != 1 {
		f.bad("partial_rotary_factor", "%g: %s rotates whole heads (1.0)", p, fam.Architecture())
	}
	if d := f.float("attention_dropout", 0); d != 0 {
		f.bad("attention_dropout", "%g: attention dropout is not implemented; set it to 0.0 to fine-tune without it", d)
	}
	if f.bool("use_mrope", false) {
		f.bad("use_mrope", "true: multimodal RoPE (Qwen2-VL) is not implemented")
	}
	if f.has("quantization_config") {
		f.bad("quantization_config", "quantized checkpoints are not implemented: use the unquantized bf16/fp16/fp32 weights")
	}
	switch fam {
	case Llama:
		c.AttentionBias = f.bool("attention_bias", false)
		c.MLPBias = f.bool("mlp_bias", false)
	case Qwen3:
		c.AttentionBias = f.bool("attention_bias", false)
	}
	switch fam {
	case Mistral:
		if _, present := m["sliding_window"]; !present {
			c.SlidingWindow = 4096
		} else {
			c.SlidingWindow = f.int("sliding_window", 0)
		}
	case Qwen2, Qwen3:
		if f.bool("use_sliding_window", false) {
			c.SlidingWindow = f.int("sliding_window", 4096)
			if _, present := m["sliding_window"]; present && !f.has("sliding_window") {
				c.SlidingWindow = 0 // null: no window even when "used"
			}
		}
		c.MaxWindowLayers = f.int("max_window_layers", 28)
		if v, ok := f.raw("layer_types"); ok {
			if err := json.Unmarshal(v, &c.LayerTypes); err != nil {
				f.bad("layer_types", "%s is not a list of strings", v)
			}
		}
	}
	c.DType = dtypeOf(f)
	c.Rope = readRope(f)
	if len(errs) == 0 {
		c = c.WithDefaults()
		if err := joinPrefixed("llama: "+path, c.problems()); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// dtypeOf reads transformers 5's dtype or the older torch_dtype.
func dtypeOf(f jsonFields) string {
	key := "dtype"
	if !f.has(key) {
		key = "torch_dtype"
	}
	switch d := f.str(key, ""); d {
	case "", "auto":
		return ""
	case "float32", "bfloat16", "float16":
		return d
	default:
		f.bad(key, "%q: want float32, bfloat16 or float16", d)
		return ""
	}
}

// readRope reads rope_parameters (transformers 5; possibly one dict per
// layer type, which must then agree) or rope_theta and rope_scaling, with
// the legacy "type" key for "rope_type".
func readRope(f jsonFields) Rope {
	theta := f.float("rope_theta", 10000)
	params, hasParams := f.object("rope_parameters")
	scaling, hasScaling := f.object("rope_scaling")
	if hasParams {
		params = flattenPerLayerRope(f, params)
	}
	var r Rope
	switch {
	case hasParams:
		pf := jsonFields{path: f.path, ctx: "rope_parameters.", m: params, errs: f.errs}
		r = ropeFrom(pf, theta)
		if hasScaling {
			sf := jsonFields{path: f.path, ctx: "rope_scaling.", m: scaling, errs: f.errs}
			if s := ropeFrom(sf, r.Theta); !reflect.DeepEqual(s, r) {
				f.bad("rope_scaling", "disagrees with rope_parameters (transformers 5 reads rope_parameters, 4.x rope_scaling): keep one")
			}
		}
	case hasScaling:
		r = ropeFrom(jsonFields{path: f.path, ctx: "rope_scaling.", m: scaling, errs: f.errs}, theta)
	default:
		r = Rope{Type: RopeDefault, Theta: theta}
	}
	return r
}

// flattenPerLayerRope turns rope_parameters keyed by layer type into its
// one dict when every layer type has the same.
func flattenPerLayerRope(f jsonFields, params map[string]json.RawMessage) map[string]json.RawMessage {
	var first map[string]json.RawMessage
	nested := false
	for _, lt := range []string{FullAttention, SlidingAttention} {
		v, ok := params[lt]
		if !ok {
			continue
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return params
		}
		nested = true
		if first == nil {
			first = m
		} else if !reflect.DeepEqual(normalizeJSON(first), normalizeJSON(m)) {
			f.bad("rope_parameters", "different RoPE per layer type is not implemented")
		}
	}
	if !nested {
		return params
	}
	return first
}

func normalizeJSON(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		var x any
		_ = json.Unmarshal(v, &x)
		b, _ := json.Marshal(x)
		out[k] = string(b)
	}
	return out
}

func ropeFrom(f jsonFields, theta float64) Rope {
	t := f.str("rope_type", "")
	if t == "" {
		t = f.str("type", RopeDefault)
	}
	return Rope{
		Type:                 t,
		Theta:                f.float("rope_theta", theta),
		Factor:               f.float("factor", 0),
		LowFreqFactor:        f.float("low_freq_factor", 0),
		HighFreqFactor:       f.float("high_freq_factor", 0),
		OriginalMaxPositions: f.int("original_max_position_embeddings", 0),
		AttentionFactor:      f.float("attention_factor", 0),
		BetaFast:             f.float("beta_fast", 0),
		BetaSlow:             f.float("beta_slow", 0),
		Mscale:               f.float("mscale", 0),
		MscaleAllDim:         f.float("mscale_all_dim", 0),
		NoTruncate:           !f.bool("truncate", true),
	}
}

// pyFloat formats v as Python's json module writes a float: 500000.0,
// 1e-05, 0.02.
func pyFloat(v float64) json.Number {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return json.Number(s)
}

// hfJSON is cfg as the family's transformers configuration class writes
// it (keys sorted, as to_json_string does), with dtype the dtype of the
// weights written beside it.
func hfJSON(cfg Config, dtype string) ([]byte, error) {
	c := cfg.WithDefaults()
	j := map[string]any{
		"architectures":           []string{c.Family.Architecture()},
		"model_type":              c.Family.String(),
		"attention_dropout":       pyFloat(0),
		"hidden_act":              "silu",
		"hidden_size":             c.Hidden,
		"initializer_range":       pyFloat(c.InitializerRange),
		"intermediate_size":       c.Intermediate,
		"max_position_embeddings": c.MaxPositions,
		"num_attention_heads":     c.Heads,
		"num_hidden_layers":       c.Layers,
		"num_key_value_heads":     c.KVHeads,
		"rms_norm_eps":            pyFloat(c.Eps),
		"rope_theta":              pyFloat(c.Rope.Theta),
		"rope_scaling":            ropeScalingJSON(c.Rope),
		"tie_word_embeddings":     c.Tied,
		"torch_dtype":             dtype,
		"dtype":                   dtype,
		"use_cache":               true,
		"vocab_size":              c.Vocab,
	}
	if c.Family != Qwen2 || c.HeadDim*c.Heads != c.Hidden {
		j["head_dim"] = c.HeadDim
	}
	switch c.Family {
	case Llama:
		j["attention_bias"] = c.AttentionBias
		j["mlp_bias"] = c.MLPBias
		j["pretraining_tp"] = 1
	case Qwen3:
		j["attention_bias"] = c.AttentionBias
	}
	switch c.Family {
	case Mistral:
		j["sliding_window"] = nullIfZero(c.SlidingWindow)
	case Qwen2, Qwen3:
		j["use_sliding_window"] = c.SlidingWindow > 0
		j["sliding_window"] = nullIfZero(c.SlidingWindow)
		j["max_window_layers"] = c.MaxWindowLayers
		j["layer_types"] = c.LayerTypes
	}
	if c.BOSTokenID != nil {
		j["bos_token_id"] = *c.BOSTokenID
	}
	if eos := eosJSON(c); eos != nil {
		j["eos_token_id"] = eos
	}
	if c.PadTokenID != nil {
		j["pad_token_id"] = *c.PadTokenID
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func nullIfZero(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func eosJSON(c Config) any {
	switch {
	case len(c.EOSTokenIDs) == 1 && !c.EOSList:
		return c.EOSTokenIDs[0]
	case len(c.EOSTokenIDs) > 0:
		return slices.Clone(c.EOSTokenIDs)
	}
	return nil
}

// ropeScalingJSON is the rope_scaling dict of r (nil for default): the
// keys of r's type, rope_type rather than the legacy type.
func ropeScalingJSON(r Rope) any {
	if r.Type == RopeDefault || r.Type == "" {
		return nil
	}
	s := map[string]any{"rope_type": r.Type, "factor": pyFloat(r.Factor)}
	switch r.Type {
	case RopeLlama3:
		s["low_freq_factor"] = pyFloat(r.LowFreqFactor)
		s["high_freq_factor"] = pyFloat(r.HighFreqFactor)
		s["original_max_position_embeddings"] = r.OriginalMaxPositions
	case RopeYarn:
		if r.OriginalMaxPositions > 0 {
			s["original_max_position_embeddings"] = r.OriginalMaxPositions
		}
		for k, v := range map[string]float64{"attention_factor": r.AttentionFactor, "beta_fast": r.BetaFast,
			"beta_slow": r.BetaSlow, "mscale": r.Mscale, "mscale_all_dim": r.MscaleAllDim} {
			if v != 0 {
				s[k] = pyFloat(v)
			}
		}
		if r.NoTruncate {
			s["truncate"] = false
		}
	case RopeDynamic:
		if r.OriginalMaxPositions > 0 {
			s["original_max_position_embeddings"] = r.OriginalMaxPositions
		}
	}
	return s
}

// WriteConfig writes cfg as the family's config.json, declaring dtype
// ("float32", "bfloat16" or "float16") as the weights' dtype.
func WriteConfig(path string, cfg Config, dtype string) error {
	b, err := hfJSON(cfg, dtype)
	if err != nil {
		return fmt.Errorf("llama: %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	return nil
}

// generationJSON is the generation_config.json transformers derives from a
// model config that has none (GenerationConfig.from_model_config).
func generationJSON(c Config) ([]byte, error) {
	j := map[string]any{"_from_model_config": true}
	if c.BOSTokenID != nil {
		j["bos_token_id"] = *c.BOSTokenID
	}
	if eos := eosJSON(c); eos != nil {
		j["eos_token_id"] = eos
	}
	if c.PadTokenID != nil {
		j["pad_token_id"] = *c.PadTokenID
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
