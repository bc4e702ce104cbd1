package gpt

import "github.com/dszero/dszero/model"

// blockViews are the named views of one transformer block's tensors in a
// flat buffer (parameters or gradients: both have the same layout).
type blockViews struct {
	ln1w, ln1b []float32 // (C)
	qkvw       []float32 // (3C, C)
	qkvb       []float32 // (3C)
	attprojw   []float32 // (C, C)
	attprojb   []float32 // (C)
	ln2w, ln2b []float32 // (C)
	fcw        []float32 // (M, C)
	fcb        []float32 // (M)
	fcprojw    []float32 // (C, M)
	fcprojb    []float32 // (C)
}

// views are the named tensors of a whole flat buffer, cut in layout order.
type views struct {
	wte        []float32 // (V, C)
	wpe        []float32 // (Context, C)
	blocks     []blockViews
	lnfw, lnfb []float32 // (C)
	head       []float32 // (V, C); the same slice as wte when tied
}

// cut points v's fields into buf, which has layout l (from cfg.Layout()).
func (v *views) cut(l *model.Layout, cfg Config, buf []float32) {
	i := 0
	next := func() []float32 {
		s := l.View(buf, i)
		i++
		return s
	}
	v.wte = next()
	v.wpe = next()
	v.blocks = make([]blockViews, cfg.Layers)
	for b := range v.blocks {
		bv := &v.blocks[b]
		bv.ln1w, bv.ln1b = next(), next()
		bv.qkvw, bv.qkvb = next(), next()
		bv.attprojw, bv.attprojb = next(), next()
		bv.ln2w, bv.ln2b = next(), next()
		bv.fcw, bv.fcb = next(), next()
		bv.fcprojw, bv.fcprojb = next(), next()
	}
	v.lnfw, v.lnfb = next(), next()
	if cfg.Tied {
		v.head = v.wte
	} else {
		v.head = next()
	}
	if i != len(l.Specs) {
		panic("gpt: views and layout disagree")
	}
}
