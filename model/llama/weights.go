package llama

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dszero/dszero/model"
)

// Weights is the safetensors weights of a Hugging Face checkpoint
// directory (model.safetensors, or shards with model.safetensors.index.json),
// checked against a config and open for reading any range of the flat
// parameter buffer: ReadRange reads only the bytes of that range, so a
// ZeRO stage-3 rank loads its partitions without the rest of the model.
// Tensors may be F32, BF16 or F16 (widened exactly). A tied checkpoint's
// stored lm_head.weight is ignored (the config ties it to embed_tokens,
// as transformers does), and so are the rotary_emb.inv_freq buffers of
// old conversions.
type Weights struct {
	dir    string
	cfg    Config
	layout model.Layout
	st     *model.SafetensorsDir
	dtypes map[string]int // dtype -> tensors of the layout stored in it
}

// OpenWeights opens the weights of dir for cfg. Every tensor of the
// layout must be present with its shape; an unknown tensor is an error.
// All problems are reported together, each naming the file and tensor.
func OpenWeights(dir string, cfg Config) (_ *Weights, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := model.OpenSafetensorsDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	w := &Weights{dir: dir, cfg: cfg, layout: cfg.Layout(), st: st, dtypes: map[string]int{}}
	l := &w.layout
	var errs []error
	seen := make([]bool, len(l.Specs))
	for _, t := range st.Tensors() {
		_, f, _ := st.Lookup(t.Name)
		file := filepath.Base(f.Path)
		if strings.HasSuffix(t.Name, ".rotary_emb.inv_freq") {
			continue
		}
		want, isHead := []int(nil), false
		i, ok := l.Index(t.Name)
		if ok {
			want = l.Specs[i].Shape
		} else if cfg.Tied && t.Name == "lm_head.weight" {
			want, isHead = []int{cfg.Vocab, cfg.Hidden}, true
		} else {
			errs = append(errs, fmt.Errorf("llama: %s: unknown tensor %q (%s %v) for %s", file, t.Name, t.DType, t.Shape, cfg.describe()))
			continue
		}
		switch {
		case !slices.Equal(t.Shape, want):
			errs = append(errs, fmt.Errorf("llama: %s: tensor %q has shape %v, want %v for %s", file, t.Name, t.Shape, want, cfg.describe()))
		case t.DType != "F32" && t.DType != "BF16" && t.DType != "F16":
			errs = append(errs, fmt.Errorf("llama: %s: tensor %q has dtype %s, want F32, BF16 or F16", file, t.Name, t.DType))
		case !isHead:
			seen[i] = true
			w.dtypes[t.DType]++
		}
	}
	for i, ok := range seen {
		if !ok {
			s := l.Specs[i]
			errs = append(errs, fmt.Errorf("llama: %s: missing tensor %q %v for %s", dir, s.Name, s.Shape, cfg.describe()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return w, nil
}

// Close closes the files.
func (w *Weights) Close() error { return w.st.Close() }

// Config is the configuration the weights were checked against.
func (w *Weights) Config() Config { return w.cfg }

// DType is the torch dtype the checkpoint's tensors are stored in
// ("bfloat16", "float16", "float32"), the most common one if they mix.
func (w *Weights) DType() string {
	best, n := "F32", -1
	for _, dt := range []string{"BF16", "F16", "F32"} {
		if w.dtypes[dt] > n {
			best, n = dt, w.dtypes[dt]
		}
	}
	return torchDType(best)
}

// ReadRange writes elements [lo, lo+len(dst)) of the flat parameter
// buffer (the config's layout) into dst, reading only those elements'
// bytes from the files that hold them.
func (w *Weights) ReadRange(dst []float32, lo int) error {
	hi := lo + len(dst)
	if lo < 0 || hi > w.layout.Numel {
		return fmt.Errorf("llama: %s: range [%d, %d) outside the model's %d parameters", w.dir, lo, hi, w.layout.Numel)
	}
	for _, s := range w.layout.Specs {
		a, b := max(lo, s.Offset), min(hi, s.Offset+s.Numel)
		if a >= b {
			continue
		}
		if err := w.st.ReadFloat32Range(s.Name, a-s.Offset, dst[a-lo:b-lo]); err != nil {
			return fmt.Errorf("llama: %w", err)
		}
	}
	return nil
}

// ReadDir reads dir/config.json and every weight into a new flat buffer.
func ReadDir(dir string) (Config, []float32, error) {
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, nil, err
	}
	w, err := OpenWeights(dir, cfg)
	if err != nil {
		return Config{}, nil, err
	}
	defer w.Close()
	params := make([]float32, w.layout.Numel)
	if err := w.ReadRange(params, 0); err != nil {
		return Config{}, nil, err
	}
	return w.cfg, params, nil
}

// torchDType is the torch dtype name of a safetensors dtype.
func torchDType(st string) string {
	switch st {
	case "BF16":
		return "bfloat16"
	case "F16":
		return "float16"
	}
	return "float32"
}

// safetensorsDType is the safetensors dtype of a torch dtype name.
func safetensorsDType(torch string) (string, error) {
	switch torch {
	case "float32", "":
		return "F32", nil
	case "bfloat16":
		return "BF16", nil
	case "float16":
		return "F16", nil
	}
	return "", fmt.Errorf("llama: dtype %q, want float32, bfloat16 or float16", torch)
}

// LoadDir reads a Hugging Face directory and returns a model bound to the
// loaded parameters (Params) without a gradient buffer: Bind m.Params()
// with one to train.
func LoadDir(dir string, opt Options) (*Model, error) {
	cfg, params, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(cfg, opt)
	if err != nil {
		return nil, err
	}
	if err := m.Bind(params, nil); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}
