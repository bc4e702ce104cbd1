package model

import (
	"errors"
	"fmt"
	"slices"
)

// ReadLayout reads a safetensors file whose tensors carry the layout's
// canonical names into dst, a flat buffer of layout l. Every tensor must
// be present with its exact shape; unknown tensors are errors; F16 and
// BF16 are widened exactly. All problems are reported together.
func ReadLayout(path string, l *Layout, dst []float32) error {
	if len(dst) != l.Numel {
		return fmt.Errorf("%s: destination has %d elements, the layout %d", path, len(dst), l.Numel)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	seen := make([]bool, len(l.Specs))
	for _, t := range f.Tensors {
		i, ok := l.Index(t.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown tensor %q (%s %v)", path, t.Name, t.DType, t.Shape))
			continue
		}
		if s := l.Specs[i]; !slices.Equal(t.Shape, s.Shape) {
			errs = append(errs, fmt.Errorf("%s: tensor %q has shape %v, want %v", path, t.Name, t.Shape, s.Shape))
			continue
		}
		seen[i] = true
		if err := f.ReadFloat32(t.Name, l.View(dst, i)); err != nil {
			errs = append(errs, err)
		}
	}
	for i, ok := range seen {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: missing tensor %q %v", path, l.Specs[i].Name, l.Specs[i].Shape))
		}
	}
	return errors.Join(errs...)
}

// WriteLayout writes params, a flat buffer of layout l, as F32 tensors
// with the canonical names in flat-buffer order.
func WriteLayout(path string, l *Layout, params []float32, metadata map[string]string) error {
	if len(params) != l.Numel {
		return fmt.Errorf("%s: parameter buffer has %d elements, the layout %d", path, len(params), l.Numel)
	}
	ts := make([]Tensor, len(l.Specs))
	for i, s := range l.Specs {
		ts[i] = Tensor{Name: s.Name, Shape: s.Shape, Data: l.View(params, i)}
	}
	return WriteSafetensors(path, ts, metadata)
}
