package model

import (
	"fmt"
	"strings"
)

// InitKind says how a parameter tensor is initialised.
type InitKind int

const (
	InitZeros   InitKind = iota // every element 0 (biases)
	InitOnes                    // every element 1 (LayerNorm weights)
	InitNormal                  // N(0, Scale²)
	InitUniform                 // U(-Scale, Scale)
)

var initKindNames = [...]string{"zeros", "ones", "normal", "uniform"}

func (k InitKind) String() string {
	if k < 0 || int(k) >= len(initKindNames) {
		return fmt.Sprintf("InitKind(%d)", int(k))
	}
	return initKindNames[k]
}

// Init is the initialisation rule of one parameter tensor.
type Init struct {
	Kind  InitKind
	Scale float64 // standard deviation (InitNormal) or bound (InitUniform); unused otherwise
}

// ParamSpec describes one named view of the flat parameter buffer.
type ParamSpec struct {
	Name   string // canonical name, e.g. "blocks.0.attn.qkv.weight" (PyTorch named_parameters)
	Shape  []int  // PyTorch shape; Linear weights are (out, in)
	Offset int    // first element in the flat buffer
	Numel  int    // product of Shape
	Unit   int    // index of the unit that owns this tensor
	Init   Init   // how Init fills it
}

// Unit is a contiguous run of parameters that ZeRO stage 3 gathers and
// releases together and that activation checkpointing recomputes together.
type Unit struct {
	Name   string // "embeddings", "blocks.3", "head", "fc1", ...
	First  int    // index of the unit's first parameter in Specs
	Last   int    // index of the unit's last parameter in Specs (inclusive)
	Offset int    // first element of the unit in the flat buffer
	Numel  int    // elements of the unit; the unit is [Offset, Offset+Numel)
	// Borrows lists other units whose parameters this unit also reads. A
	// GPT head with tied embeddings reads wte, which unit 0 owns: a stage
	// that gathers per unit must keep unit 0 gathered while the head runs,
	// and unit 0's gradients are complete only after unit 0's AfterBackward.
	Borrows []int
}

// Layout is the flat-buffer layout of a model: every parameter tensor in
// PyTorch named_parameters order, packed without gaps, grouped into units.
type Layout struct {
	Specs []ParamSpec
	Units []Unit
	Numel int // total elements of the flat buffer
}

// Index returns the position of the named parameter in Specs.
func (l *Layout) Index(name string) (int, bool) {
	for i := range l.Specs {
		if l.Specs[i].Name == name {
			return i, true
		}
	}
	return -1, false
}

// View returns parameter i's view of buf, a flat buffer with this layout.
func (l *Layout) View(buf []float32, i int) []float32 {
	s := &l.Specs[i]
	return buf[s.Offset : s.Offset+s.Numel : s.Offset+s.Numel]
}

// UnitView returns unit u's range of buf.
func (l *Layout) UnitView(buf []float32, u int) []float32 {
	un := &l.Units[u]
	return buf[un.Offset : un.Offset+un.Numel : un.Offset+un.Numel]
}

// String lists the layout, one parameter a line, for debugging and docs.
func (l *Layout) String() string {
	var b strings.Builder
	for _, u := range l.Units {
		fmt.Fprintf(&b, "unit %s [%d, %d)\n", u.Name, u.Offset, u.Offset+u.Numel)
		for _, s := range l.Specs[u.First : u.Last+1] {
			fmt.Fprintf(&b, "  %-32s %v @%d\n", s.Name, s.Shape, s.Offset)
		}
	}
	return b.String()
}

// LayoutBuilder appends parameters in order and groups them into units.
// A model's constructor uses it once; the result is immutable by
// convention.
type LayoutBuilder struct {
	l Layout
}

// Unit starts a new unit; the parameters added next belong to it.
func (b *LayoutBuilder) Unit(name string, borrows ...int) {
	b.closeUnit()
	b.l.Units = append(b.l.Units, Unit{Name: name, First: len(b.l.Specs), Offset: b.l.Numel, Borrows: borrows})
}

// Param appends a tensor to the current unit and returns its index.
func (b *LayoutBuilder) Param(name string, init Init, shape ...int) int {
	if len(b.l.Units) == 0 {
		panic("model: LayoutBuilder.Param before Unit")
	}
	n := 1
	for _, d := range shape {
		if d <= 0 {
			panic(fmt.Sprintf("model: parameter %s has shape %v", name, shape))
		}
		n *= d
	}
	b.l.Specs = append(b.l.Specs, ParamSpec{
		Name:   name,
		Shape:  append([]int(nil), shape...),
		Offset: b.l.Numel,
		Numel:  n,
		Unit:   len(b.l.Units) - 1,
		Init:   init,
	})
	b.l.Numel += n
	return len(b.l.Specs) - 1
}

func (b *LayoutBuilder) closeUnit() {
	if k := len(b.l.Units); k > 0 {
		u := &b.l.Units[k-1]
		u.Last = len(b.l.Specs) - 1
		u.Numel = b.l.Numel - u.Offset
		if u.Last < u.First {
			panic(fmt.Sprintf("model: unit %s has no parameters", u.Name))
		}
	}
}

// Build finishes the layout.
func (b *LayoutBuilder) Build() Layout {
	b.closeUnit()
	l := b.l
	b.l = Layout{}
	return l
}
