package gpt

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestReadRange: any range of the flat buffer read from a file — in
// Hugging Face layout (Conv1D weights transposed) or canonical — equals
// that range of the whole model read at once, including ranges that cut
// through a transposed weight's rows and span several tensors.
func TestReadRange(t *testing.T) {
	cfg := Config{Vocab: 40, Context: 12, Dim: 16, Heads: 2, Layers: 2}.WithDefaults()
	l := cfg.Layout()
	params := make([]float32, l.Numel)
	l.InitRange(3, params, 0)
	dir := t.TempDir()
	for name, write := range map[string]func(string, Config, []float32) error{"hf": WriteHF, "canonical": WriteWeights} {
		path := filepath.Join(dir, name+".safetensors")
		if err := write(path, cfg, params); err != nil {
			t.Fatal(err)
		}
		w, err := OpenWeights(path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int{{0, l.Numel}, {1, 2}, {17, 1000}, {l.Numel - 5, l.Numel}, {700, 3101}} {
			got := make([]float32, r[1]-r[0])
			if err := w.ReadRange(got, r[0]); err != nil {
				t.Fatalf("%s [%d, %d): %v", name, r[0], r[1], err)
			}
			if !slices.Equal(got, params[r[0]:r[1]]) {
				t.Errorf("%s: range [%d, %d) differs from the model", name, r[0], r[1])
			}
		}
		if err := w.ReadRange(make([]float32, 2), l.Numel-1); err == nil {
			t.Errorf("%s: a range past the end was read", name)
		}
		w.Close()
	}
}
