package gpt

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dszero/dszero/model"
)

// Weights is a safetensors file of a GPT's weights, checked against a
// config and open for reading any range of the flat parameter buffer:
// ReadRange reads only the bytes of that range, so a ZeRO-3 rank loads
// its partitions of a checkpoint without the rest of the model.
type Weights struct {
	path   string
	cfg    Config
	layout model.Layout
	f      *model.SafetensorsFile
	files  []fileTensor // per parameter of the layout
	// tiedHead is a stored lm_head.weight of a tied config (some
	// checkpoints keep one); ReadWeights checks that it equals wte.
	tiedHead string
}

// fileTensor says where a parameter is in the file.
type fileTensor struct {
	name       string
	transposed bool // stored (in, out): Hugging Face Conv1D
}

// OpenWeights opens a safetensors file with canonical or Hugging Face
// names for cfg. Every tensor must be present with the right shape;
// unknown tensors are errors (Hugging Face mask buffers excepted). All of
// the problems are reported together, each naming the file and tensor.
func OpenWeights(path string, cfg Config) (_ *Weights, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := model.OpenSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("gpt: %w", err)
	}
	w := &Weights{path: path, cfg: cfg, layout: cfg.Layout(), f: f}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	l := &w.layout
	hf := true
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, "blocks.") {
			hf = false
		}
	}
	want := map[string]int{}
	for i, s := range l.Specs {
		name := s.Name
		if hf {
			name, _ = HFName(s.Name)
		}
		want[name] = i
	}
	var errs []error
	w.files = make([]fileTensor, len(l.Specs))
	for _, t := range f.Tensors {
		name := t.Name
		if hf {
			name = strings.TrimPrefix(name, "transformer.")
			if hfBuffer.MatchString(name) {
				continue
			}
		}
		i, ok := want[name]
		if !ok && hf && cfg.Tied && name == "lm_head.weight" {
			if !slices.Equal(t.Shape, []int{cfg.Vocab, cfg.Dim}) {
				errs = append(errs, fmt.Errorf("gpt: %s: tensor %q has shape %v, want %v", path, t.Name, t.Shape, []int{cfg.Vocab, cfg.Dim}))
			}
			w.tiedHead = t.Name
			continue
		}
		if !ok {
			errs = append(errs, fmt.Errorf("gpt: %s: unknown tensor %q (%s %v) for %s", path, t.Name, t.DType, t.Shape, describe(cfg)))
			continue
		}
		s := l.Specs[i]
		tr := false
		if hf {
			_, tr = HFName(s.Name)
		}
		shape := s.Shape
		if tr {
			shape = []int{s.Shape[1], s.Shape[0]}
		}
		if !slices.Equal(t.Shape, shape) {
			errs = append(errs, fmt.Errorf("gpt: %s: tensor %q has shape %v, want %v for %s", path, t.Name, t.Shape, shape, describe(cfg)))
			continue
		}
		w.files[i] = fileTensor{name: t.Name, transposed: tr}
	}
	for i, ft := range w.files {
		if ft.name == "" {
			name := l.Specs[i].Name
			if hf {
				name, _ = HFName(name)
			}
			errs = append(errs, fmt.Errorf("gpt: %s: missing tensor %q %v for %s", path, name, l.Specs[i].Shape, describe(cfg)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return w, nil
}

// Close closes the file.
func (w *Weights) Close() error { return w.f.Close() }

// ReadRange writes elements [lo, lo+len(dst)) of the flat parameter
// buffer (the config's layout) into dst, reading only those elements'
// bytes (a Conv1D weight, stored transposed, is read column run by column
// run).
func (w *Weights) ReadRange(dst []float32, lo int) error {
	hi := lo + len(dst)
	if lo < 0 || hi > w.layout.Numel {
		return fmt.Errorf("gpt: %s: range [%d, %d) outside the model's %d parameters", w.path, lo, hi, w.layout.Numel)
	}
	for i, s := range w.layout.Specs {
		a, b := max(lo, s.Offset), min(hi, s.Offset+s.Numel)
		if a >= b {
			continue
		}
		if err := w.readParam(i, a-s.Offset, dst[a-lo:b-lo]); err != nil {
			return err
		}
	}
	return nil
}

// readParam reads elements [a, a+len(out)) of parameter i.
func (w *Weights) readParam(i, a int, out []float32) error {
	ft, s := w.files[i], w.layout.Specs[i]
	if !ft.transposed {
		if err := w.f.ReadFloat32Range(ft.name, a, out); err != nil {
			return fmt.Errorf("gpt: %w", err)
		}
		return nil
	}
	// Ours is (rows, cols) = (out, in); the file holds (in, out), so our
	// element (r, c) is the file's c·rows + r: for each column c, the rows
	// of the range are one contiguous run of the file.
	rows, cols := s.Shape[0], s.Shape[1]
	b := a + len(out)
	r0, r1 := a/cols, (b-1)/cols
	run := make([]float32, r1-r0+1)
	for c := range cols {
		if err := w.f.ReadFloat32Range(ft.name, c*rows+r0, run); err != nil {
			return fmt.Errorf("gpt: %w", err)
		}
		for r := r0; r <= r1; r++ {
			if e := r*cols + c; e >= a && e < b {
				out[e-a] = run[r-r0]
			}
		}
	}
	return nil
}

// ReadWeights reads a safetensors file with canonical or Hugging Face
// names into dst, a flat buffer of cfg's layout (see OpenWeights). F16 and
// BF16 tensors are widened exactly. A stored lm_head of a tied config must
// equal wte.
func ReadWeights(path string, cfg Config, dst []float32) error {
	w, err := OpenWeights(path, cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	if len(dst) != w.layout.Numel {
		return fmt.Errorf("gpt: %s: destination has %d elements, the model %d", path, len(dst), w.layout.Numel)
	}
	if err := w.ReadRange(dst, 0); err != nil {
		return err
	}
	if w.tiedHead != "" {
		head := make([]float32, w.cfg.Vocab*w.cfg.Dim)
		if err := w.f.ReadFloat32(w.tiedHead, head); err != nil {
			return fmt.Errorf("gpt: %w", err)
		}
		if !slices.Equal(head, w.layout.View(dst, 0)) {
			return fmt.Errorf("gpt: %s: lm_head.weight differs from wte.weight but the config ties them", path)
		}
	}
	return nil
}
