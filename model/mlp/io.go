package mlp

import (
	"fmt"

	"github.com/dszero/dszero/model"
)

// ReadWeights reads a safetensors file with canonical names (fc1.weight,
// fc1.bias, ...; the harness's mlp_init.safetensors) into dst, a flat
// buffer of cfg's layout.
func ReadWeights(path string, cfg Config, dst []float32) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l := cfg.Layout()
	if err := model.ReadLayout(path, &l, dst); err != nil {
		return fmt.Errorf("mlp: %w", err)
	}
	return nil
}

// WriteWeights writes params (cfg's layout) with canonical names.
func WriteWeights(path string, cfg Config, params []float32) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l := cfg.Layout()
	if err := model.WriteLayout(path, &l, params, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("mlp: %w", err)
	}
	return nil
}
