package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/llama"
	"github.com/dszero/dszero/model/mlp"
)

// ModelDesc is one model of models.json: the parameters in
// named_parameters() order, the initial weights and the data.
type ModelDesc struct {
	Params []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
	} `json:"params"`
	InitFile   string           `json:"init_file"` // relative to the init directory's parent, as the harness writes it
	DataFile   string           `json:"data_file"`
	DataShapes map[string][]int `json:"data_shapes"`
	// Optional, for cases made by other generators: the architecture
	// ("gpt", "mlp"), the GPT's heads, the MLP's activation and loss.
	Arch       string `json:"arch"`
	Heads      int    `json:"heads"`
	Activation string `json:"activation"`
	Loss       string `json:"loss"`
	// LlamaConfig is a Llama-family model's config.json ("arch": "llama").
	LlamaConfig json.RawMessage `json:"llama_config"`
}

// unsupportedError marks what dszero does not run: the case is reported
// "unsupported", never passed.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

func unsupported(format string, a ...any) error {
	return &unsupportedError{fmt.Sprintf(format, a...)}
}

// readModel reads the case's entry of models.json.
func readModel(c *Case) (ModelDesc, error) {
	var all map[string]ModelDesc
	path := filepath.Join(c.InitDir, ModelsFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return ModelDesc{}, err
	}
	if err := json.Unmarshal(raw, &all); err != nil {
		return ModelDesc{}, fmt.Errorf("%s: %w", path, err)
	}
	key := c.ModelKey()
	d, ok := all[key]
	if !ok {
		return ModelDesc{}, fmt.Errorf("%s: no model %q", path, key)
	}
	return d, nil
}

// initPath resolves a models.json file name ("init/gpt_init.safetensors",
// relative to the harness's output root) in the init directory.
func (c *Case) initPath(name string) string {
	return filepath.Join(c.InitDir, filepath.Base(name))
}

// arch is a model dszero builds from a description: its flat layout, and
// for each rank a network bound to the engine's buffers.
type arch struct {
	name   string
	layout model.Layout
	gpt    gpt.Config
	mlp    mlp.Config
	llama  llama.Config // model_llama.go
	// Data: samples in order; the GPT's token rows (SeqLen+1 each), the
	// MLP's inputs and targets.
	samples int
	seqLen  int
	tokens  []int64
	x, y    []float32
}

var (
	gptBlockParam = regexp.MustCompile(`^blocks\.(\d+)\.`)
	mlpParam      = regexp.MustCompile(`^fc(\d+)\.(weight|bias)$`)
)

// buildArch recognizes the architecture of d by its parameters, builds
// dszero's model of it and checks that dszero's layout is d's parameter
// list exactly (names, shapes, order).
func buildArch(c *Case, d ModelDesc) (*arch, error) {
	shape := map[string][]int{}
	for _, p := range d.Params {
		shape[p.Name] = p.Shape
	}
	kind := d.Arch
	if kind == "" {
		switch {
		case shape["wte.weight"] != nil && shape["wpe.weight"] != nil:
			kind = "gpt"
		case len(d.Params) > 0 && mlpParam.MatchString(d.Params[0].Name):
			kind = "mlp"
		case shape["model.embed_tokens.weight"] != nil:
			kind = "llama"
		default:
			first := "(none)"
			if len(d.Params) > 0 {
				first = d.Params[0].Name
			}
			return nil, unsupported("model %q: an architecture dszero does not know (first parameter %s); dszero builds GPT-2-style transformers and ReLU MLPs", c.ModelKey(), first)
		}
	}
	a := &arch{name: kind}
	switch kind {
	case "gpt":
		wte, wpe := shape["wte.weight"], shape["wpe.weight"]
		if len(wte) != 2 || len(wpe) != 2 {
			return nil, unsupported("gpt: wte/wpe are not matrices")
		}
		layers := 0
		for _, p := range d.Params {
			if m := gptBlockParam.FindStringSubmatch(p.Name); m != nil {
				i, _ := strconv.Atoi(m[1])
				layers = max(layers, i+1)
			}
		}
		fc := shape["blocks.0.mlp.fc.weight"]
		if layers == 0 || len(fc) != 2 {
			return nil, unsupported("gpt: no blocks.0.mlp.fc.weight: not a GPT-2-style block")
		}
		heads := d.Heads
		if heads == 0 {
			heads = c.Meta.Heads
		}
		if heads == 0 {
			heads = max(1, wte[1]/16) // the harness's TinyGPT: head size 16
		}
		_, hasHead := shape["lm_head.weight"]
		a.gpt = gpt.Config{Vocab: wte[0], Context: wpe[0], Dim: wte[1], Heads: heads, Layers: layers, MLP: fc[0], Tied: !hasHead}.WithDefaults()
		if err := a.gpt.Validate(); err != nil {
			return nil, unsupported("gpt: %v", err)
		}
		if d.Activation != "" && d.Activation != "gelu_tanh" {
			return nil, unsupported("gpt: activation %q (dszero's GPT uses gelu_tanh)", d.Activation)
		}
		if d.Loss != "" && d.Loss != "cross_entropy" {
			return nil, unsupported("gpt: loss %q (dszero's GPT uses cross_entropy)", d.Loss)
		}
		a.layout = a.gpt.Layout()
	case "mlp":
		sizes := []int{}
		for i, p := range d.Params {
			m := mlpParam.FindStringSubmatch(p.Name)
			if m == nil || m[1] != strconv.Itoa(i/2+1) || (m[2] == "weight") != (i%2 == 0) {
				return nil, unsupported("mlp: parameter %d is %s; dszero's MLP is fc1.weight, fc1.bias, fc2.weight, …", i, p.Name)
			}
			if m[2] == "weight" {
				if len(p.Shape) != 2 {
					return nil, unsupported("mlp: %s has shape %v", p.Name, p.Shape)
				}
				if len(sizes) == 0 {
					sizes = append(sizes, p.Shape[1])
				}
				sizes = append(sizes, p.Shape[0])
			}
		}
		if d.Activation != "" && d.Activation != "relu" {
			return nil, unsupported("mlp: activation %q (dszero's MLP uses ReLU)", d.Activation)
		}
		if d.Loss != "" && d.Loss != "mse" {
			return nil, unsupported("mlp: loss %q (dszero's MLP uses the mean squared error)", d.Loss)
		}
		a.mlp = mlp.Config{Sizes: sizes}
		if err := a.mlp.Validate(); err != nil {
			return nil, unsupported("%v", err)
		}
		a.layout = a.mlp.Layout()
	case "llama":
		if err := a.buildLlama(c, d); err != nil {
			return nil, err
		}
	default:
		return nil, unsupported("model %q: architecture %q", c.ModelKey(), kind)
	}
	if len(a.layout.Specs) != len(d.Params) {
		return nil, unsupported("%s: models.json lists %d parameters, dszero's %s layout has %d", c.ModelKey(), len(d.Params), kind, len(a.layout.Specs))
	}
	for i, s := range a.layout.Specs {
		p := d.Params[i]
		if s.Name != p.Name || !slices.Equal(s.Shape, p.Shape) {
			return nil, unsupported("%s: parameter %d is %s %v in models.json, %s %v in dszero's %s", c.ModelKey(), i, p.Name, p.Shape, s.Name, s.Shape, kind)
		}
	}
	return a, nil
}

// loadData reads the initial weights and the data of the description.
func (a *arch) loadData(c *Case, d ModelDesc) ([]float32, error) {
	init := make([]float32, a.layout.Numel)
	if err := model.ReadLayout(c.initPath(d.InitFile), &a.layout, init); err != nil {
		return nil, err
	}
	f, err := model.OpenSafetensors(c.initPath(d.DataFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The leading dimensions are [step, sample]: samples in order.
	rows := func(name string) (n, width int, err error) {
		t, ok := f.Lookup(name)
		if !ok || len(t.Shape) < 2 {
			return 0, 0, fmt.Errorf("%s: no tensor %q of shape [..., width]", f.Path, name)
		}
		width = t.Shape[len(t.Shape)-1]
		return t.Numel() / width, width, nil
	}
	switch a.name {
	case "gpt", "llama":
		n, w, err := rows("tokens")
		if err != nil {
			return nil, err
		}
		a.samples, a.seqLen = n, w-1
		if ctx := a.builder().MaxSeq(); a.seqLen < 1 || a.seqLen > ctx {
			return nil, unsupported("%s: samples of %d tokens for a context of %d", a.name, w, ctx)
		}
		a.tokens = make([]int64, n*w)
		err = f.ReadInt64("tokens", a.tokens)
		return init, err
	case "mlp":
		n, w, err := rows("x")
		if err != nil {
			return nil, err
		}
		ny, wy, err := rows("y")
		if err != nil {
			return nil, err
		}
		if w != a.mlp.Sizes[0] || wy != a.mlp.Sizes[len(a.mlp.Sizes)-1] || ny != n {
			return nil, fmt.Errorf("%s: x %d×%d and y %d×%d do not fit the MLP %v", f.Path, n, w, ny, wy, a.mlp.Sizes)
		}
		a.samples = n
		a.x, a.y = make([]float32, n*w), make([]float32, n*wy)
		if err := f.ReadFloat32("x", a.x); err != nil {
			return nil, err
		}
		return init, f.ReadFloat32("y", a.y)
	}
	return nil, fmt.Errorf("no data for %s", a.name)
}
