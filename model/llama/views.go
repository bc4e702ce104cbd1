package llama

import "github.com/dszero/dszero/model"

// layerViews are the named views of one decoder layer's tensors in a flat
// buffer (parameters or gradients: both have the same layout). A bias or
// norm the family does not have is nil.
type layerViews struct {
	qw, qb   []float32 // q_proj (nH·D, H), (nH·D)
	kw, kb   []float32 // k_proj (nKV·D, H), (nKV·D)
	vw, vb   []float32 // v_proj (nKV·D, H), (nKV·D)
	ow, ob   []float32 // o_proj (H, nH·D), (H)
	qn, kn   []float32 // q_norm, k_norm (D), Qwen3
	gw, gb   []float32 // mlp.gate_proj (I, H), (I)
	uw, ub   []float32 // mlp.up_proj (I, H), (I)
	dw, db   []float32 // mlp.down_proj (H, I), (H)
	ln1, ln2 []float32 // input_layernorm, post_attention_layernorm (H)
}

// views are the named tensors of a whole flat buffer, cut in layout order.
type views struct {
	embed  []float32 // (V, H)
	layers []layerViews
	norm   []float32 // (H)
	head   []float32 // (V, H); the same slice as embed when tied
}

// cut points v's fields into buf, which has layout l (from cfg.Layout()).
func (v *views) cut(l *model.Layout, cfg Config, buf []float32) {
	i := 0
	next := func() []float32 {
		s := l.View(buf, i)
		i++
		return s
	}
	opt := func(ok bool) []float32 {
		if ok {
			return next()
		}
		return nil
	}
	v.embed = next()
	v.layers = make([]layerViews, cfg.Layers)
	for li := range v.layers {
		lv := &v.layers[li]
		lv.qw, lv.qb = next(), opt(cfg.qkvBias())
		lv.kw, lv.kb = next(), opt(cfg.qkvBias())
		lv.vw, lv.vb = next(), opt(cfg.qkvBias())
		lv.ow, lv.ob = next(), opt(cfg.oBias())
		lv.qn, lv.kn = opt(cfg.qkNorm()), opt(cfg.qkNorm())
		lv.gw, lv.gb = next(), opt(cfg.mlpBias())
		lv.uw, lv.ub = next(), opt(cfg.mlpBias())
		lv.dw, lv.db = next(), opt(cfg.mlpBias())
		lv.ln1, lv.ln2 = next(), next()
	}
	v.norm = next()
	if cfg.Tied {
		v.head = v.embed
	} else {
		v.head = next()
	}
	if i != len(l.Specs) {
		panic("llama: views and layout disagree")
	}
}
