package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dszero/dszero/ptfile"
)

// A Record describes a checkpoint directory that DeepSpeed wrote, as the
// reference harness records it (checkpoint.json, made by walking
// torch.load's result): every file, and for each .pt file the structure
// of its contents — types, dict keys, list lengths, tensor dtypes and
// shapes. Match compares a checkpoint dszero wrote with it, so that "the
// same checkpoint files" is checked, not assumed.
type Record struct {
	Tags  []string     `json:"tags_present"`
	Tag   string       `json:"described_tag"` // the tag whose .pt contents are described
	Files []RecordFile `json:"files"`
}

// RecordFile is one file of a Record; Path is relative to the checkpoint
// directory (TAG/NAME or a root file such as latest).
type RecordFile struct {
	Path      string `json:"path"`
	Bytes     int64  `json:"bytes"`
	Content   *Node  `json:"content"`    // .pt files
	Text      string `json:"text"`       // latest
	LoadError string `json:"load_error"` // torch.load failed on it
}

// Node is the recorded structure of one value.
type Node struct {
	Type  string          `json:"type"` // tensor, dict, OrderedDict, list, int, …, "object M.C", "enum M.C", "dataclass M.C"
	DType string          `json:"dtype"`
	Shape []int64         `json:"shape"`
	Len   int             `json:"len"`
	Items json.RawMessage `json:"items"` // dict: {key: Node}; list: [Node] (absent for long lists)
	// Value is a scalar's value (and a one-element tensor's), compared
	// too: counters, learning rates, loss-scaler state.
	Value json.RawMessage `json:"value"`
}

// ReadRecord reads a checkpoint.json.
func ReadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Tag == "" || r.Tag == "all" {
		return nil, fmt.Errorf("%s: described_tag %q: a record must describe one tag", path, r.Tag)
	}
	return &r, nil
}

// engineKeys are the keys DeepSpeed's engine itself puts at the top of a
// model-states file (engine._save_checkpoint); any other key there is the
// client_state of the run that saved it, merged in by state.update.
var engineKeys = []string{"module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
	"frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "sparse_tensor_module_names", "skipped_steps",
	"global_steps", "global_samples", "dp_world_size", "mp_world_size", "ds_config", "ds_version"}

// clientKey is dszero's own client state (package doc).
const clientKey = "dszero"

// Match is the outcome of comparing a checkpoint with a Record.
type Match struct {
	Files   int      // recorded files present with the recorded structure
	Missing []string // recorded files the checkpoint lacks
	Extra   []string // files of the tag DeepSpeed did not write (dszero's manifests aside)
	Diffs   []string // structural differences, the first of each file
	// Client are recorded top-level model-states keys outside DeepSpeed's
	// own: the recording run's client state, which is not compared.
	Client []string
}

// OK says the checkpoint has every recorded file with its structure and
// nothing more.
func (m Match) OK() bool {
	return len(m.Missing) == 0 && len(m.Extra) == 0 && len(m.Diffs) == 0 && m.Files > 0
}

// MatchOptions tune Match.
type MatchOptions struct {
	// Skip are recorded root files that dszero never writes (DeepSpeed's
	// copy of its own zero_to_fp32.py script): neither compared nor
	// missing.
	Skip []string
	// StructureOnly leaves the recorded scalar values out: for a
	// checkpoint of another run than the recorded one.
	StructureOnly bool
}

// Match compares checkpoint dir/tag, and dir's root files, with the record
// (whose described tag may be named otherwise).
func (r *Record) Match(dir, tag string, o MatchOptions) (Match, error) {
	var m Match
	seen := map[string]bool{}
	for _, f := range r.Files {
		name, inTag := strings.CutPrefix(f.Path, r.Tag+"/")
		switch {
		case inTag:
			seen[name] = true
			path := filepath.Join(dir, tag, name)
			if _, err := os.Stat(path); err != nil {
				m.Missing = append(m.Missing, tag+"/"+name)
				continue
			}
			if f.Content == nil {
				m.Files++
				continue
			}
			v, err := ptfile.Read(path, ptfile.Options{DeepSpeed: true})
			if err != nil {
				return m, err
			}
			if err := matchNode(f.Content, v, name, true, !o.StructureOnly); err != nil {
				m.Diffs = append(m.Diffs, err.Error())
				continue
			}
			if strings.Contains(name, "model_states") {
				m.Client = appendNew(m.Client, clientKeys(f.Content)...)
			}
			m.Files++
		case strings.Contains(f.Path, "/"), slices.Contains(o.Skip, f.Path):
			// another tag's files, or skipped
		case f.Path == "latest":
			b, err := os.ReadFile(filepath.Join(dir, "latest"))
			switch {
			case err != nil:
				m.Missing = append(m.Missing, "latest")
			case f.Text == r.Tag && strings.TrimSpace(string(b)) != tag:
				m.Diffs = append(m.Diffs, fmt.Sprintf("latest: %q, want %q", b, tag))
			default:
				m.Files++
			}
		default:
			if _, err := os.Stat(filepath.Join(dir, f.Path)); err != nil {
				m.Missing = append(m.Missing, f.Path)
			} else {
				m.Files++
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, tag))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, err
	}
	for _, e := range ents {
		if !seen[e.Name()] && !strings.HasPrefix(e.Name(), "dszero_manifest_rank_") {
			m.Extra = append(m.Extra, tag+"/"+e.Name())
		}
	}
	return m, nil
}

// clientKeys are the recorded top-level keys outside DeepSpeed's own.
func clientKeys(n *Node) []string {
	var items map[string]*Node
	json.Unmarshal(n.Items, &items)
	var out []string
	for k := range items {
		if !slices.Contains(engineKeys, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func appendNew(xs []string, ys ...string) []string {
	for _, y := range ys {
		if !slices.Contains(xs, y) {
			xs = append(xs, y)
		}
	}
	return xs
}

// matchNode compares a value with a recorded node: types, dict keys, list
// lengths, tensor dtypes and shapes, and the recorded scalar values (not
// tensors' contents). ds_config's contents are
// the run's own; at the top of a model-states file (top), keys outside
// DeepSpeed's own are client state on either side.
func matchNode(n *Node, v any, path string, top, values bool) error {
	fail := func(f string, a ...any) error {
		return fmt.Errorf("%s: recorded %s: %s", path, n.Type, fmt.Sprintf(f, a...))
	}
	switch n.Type {
	case "tensor":
		t, ok := v.(*ptfile.Tensor)
		if !ok || t.DType.String() != n.DType || fmt.Sprint(t.Shape) != fmt.Sprint(n.Shape) {
			return fail("%s %v, got %s", n.DType, n.Shape, ptfile.TypeName(v)+" "+fmt.Sprint(v))
		}
		if values && len(n.Value) > 0 && t.Numel() == 1 {
			x, err := t.Float32s()
			if err != nil {
				return fail("%v", err)
			}
			if err := matchValue(n, float64(x[0]), valueRel); err != nil {
				return fail("%v", err)
			}
		}
	case "dict", "OrderedDict":
		d, ok := v.(*ptfile.Dict)
		if !ok || d.OrderedDict != (n.Type == "OrderedDict") {
			return fail("got %s", ptfile.TypeName(v))
		}
		if strings.HasSuffix(path, "ds_config") {
			return nil
		}
		var items map[string]*Node
		json.Unmarshal(n.Items, &items)
		client := func(k string) bool {
			return top && strings.Contains(path, "model_states") && !slices.Contains(engineKeys, k)
		}
		var want, got []string
		for k := range items {
			if !client(k) {
				want = append(want, k)
			}
		}
		for _, k := range d.Keys() {
			if ks := fmt.Sprint(k); ks != clientKey && !client(ks) {
				got = append(got, ks)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			return fail("keys %v, recorded %v", got, want)
		}
		for _, k := range d.Keys() {
			c, ok := items[fmt.Sprint(k)]
			if !ok {
				continue
			}
			x, _ := d.Get(k)
			if err := matchNode(c, x, path+"."+fmt.Sprint(k), false, values); err != nil {
				return err
			}
		}
	case "list", "tuple":
		var l []any
		switch x := v.(type) {
		case ptfile.List:
			l = x
			if n.Type != "list" {
				return fail("got list %v", v)
			}
		case ptfile.Tuple:
			l = x
			if n.Type != "tuple" {
				return fail("got tuple %v", v)
			}
		default:
			return fail("got %s", ptfile.TypeName(v))
		}
		if len(l) != n.Len {
			return fail("got %d items: %v", len(l), v)
		}
		var items []*Node
		json.Unmarshal(n.Items, &items)
		for i, c := range items {
			if err := matchNode(c, l[i], fmt.Sprintf("%s[%d]", path, i), false, values); err != nil {
				return err
			}
		}
	case "int", "float", "bool", "str", "NoneType", "torch.Size", "builtins.set":
		want := map[string]string{"int": "int", "float": "float", "bool": "bool", "str": "str", "NoneType": "None", "torch.Size": "torch.Size", "builtins.set": "set"}[n.Type]
		if got := ptfile.TypeName(v); got != want {
			return fail("got %s", got)
		}
		if err := matchValue(n, v, valueTol(path)); values && err != nil && !strings.HasSuffix(path, "ds_version") {
			return fail("%v", err)
		}
	default:
		o, ok := v.(*ptfile.Object)
		if !ok || !strings.HasSuffix(n.Type, " "+o.Class()) {
			return fail("got %s", ptfile.TypeName(v))
		}
	}
	return nil
}

// valueRel bounds the relative difference of recorded floats: DeepSpeed
// computes them in Python floats, dszero in float64 with the same
// formulas (learning rates, betas).
const valueRel = 1e-12

// computedRel bounds the relative difference of the floats that an
// optimizer computes from float32 tensors and keeps as Python floats
// (OnebitLamb's lamb_coeff_freeze, last_factor and scaling_coeff: .item()
// of float32 norms and maxima): a few float32 ulps of the training's own
// rounding, not a formula's.
const computedRel = 1e-6

// valueTol is the relative tolerance of the recorded value at path.
func valueTol(path string) float64 {
	for _, k := range []string{".lamb_coeff_freeze", ".last_factor", ".scaling_coeff"} {
		if strings.HasSuffix(path, k) {
			return computedRel
		}
	}
	return valueRel
}

// matchValue compares a scalar with its recorded value, when recorded,
// to rel relative.
func matchValue(n *Node, v any, rel float64) error {
	if len(n.Value) == 0 || string(n.Value) == "null" {
		return nil
	}
	var want any
	if err := json.Unmarshal(n.Value, &want); err != nil {
		return nil // a value JSON cannot hold (inf, nan): not compared
	}
	switch w := want.(type) {
	case float64:
		var got float64
		switch x := v.(type) {
		case float64:
			got = x
		case int64:
			got = float64(x)
		default:
			return fmt.Errorf("value %v, recorded %v", v, w)
		}
		if math.Abs(got-w) > rel*math.Abs(w) {
			return fmt.Errorf("value %v, recorded %v", got, w)
		}
	case bool, string:
		if v != want {
			return fmt.Errorf("value %v, recorded %v", v, w)
		}
	}
	return nil
}
