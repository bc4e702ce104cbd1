package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Case is one reference run read from its directory: the recorded result,
// the optional case.json, and where its model description lives.
type Case struct {
	Name   string // the directory relative to the root it was found under, with '/' separators
	Dir    string
	Result Result
	Meta   Meta
	// InitDir holds models.json and the initial weights and data.
	InitDir string
	// Facts says the directory holds reference facts (FactsFile), not a
	// training run.
	Facts bool
}

// Meta is a case's optional case.json. Every field may be left out.
type Meta struct {
	// Init is the directory of models.json, relative to the case or
	// absolute (default: the nearest init/ with a models.json, searching the case
	// directory and its parents).
	Init string `json:"init"`
	// Model is the key in models.json (default: result.json's "model").
	Model string `json:"model"`
	// DSConfig is the ds_config when result.json has none (a plain PyTorch
	// baseline run on an equivalent config).
	DSConfig json.RawMessage `json:"ds_config"`
	// DeepSpeedVersion is whose semantics to follow when result.json has
	// no deepspeed_version ("0.14.5", "0.19.5").
	DeepSpeedVersion string `json:"deepspeed_version"`
	// WorldSize overrides the world size read from the per-rank records.
	WorldSize int `json:"world_size"`
	// Heads is the GPT's attention heads when models.json does not say
	// (default: head size 16, the harness's TinyGPT).
	Heads int `json:"heads"`
	// Tolerances override the defaults of the run's dtype.
	Tolerances Tolerances `json:"tolerances"`
	// Notes are carried into the report.
	Notes string `json:"notes"`
}

// Result is the part of a reference run's result.json the runner reads.
type Result struct {
	Model            string          `json:"model"`
	Run              string          `json:"run"`
	Status           string          `json:"status"`
	Note             string          `json:"note"`
	DSConfig         json.RawMessage `json:"ds_config"`
	DeepSpeedVersion string          `json:"deepspeed_version"`
	TorchVersion     string          `json:"torch_version"`
	Steps            []StepRecord    `json:"steps"`
	FinalIdenticalTo string          `json:"final_fp32_identical_to"`
	FinalFile        string          `json:"final_fp32_file"`
	Resume           json.RawMessage `json:"resume_from_step5"`
	CheckpointFiles  json.RawMessage `json:"checkpoint_files"`
}

// StepRecord is one optimizer step of the reference.
type StepRecord struct {
	Step      int      `json:"step"`
	LRUsed    float64  `json:"lr_used"`
	Loss      float64  `json:"loss"`
	GradNorm  *float64 `json:"grad_norm"`
	LossScale *float64 `json:"loss_scale"`
	// Micro is [rank][micro] (result.json writes {"rank0": [...]} for
	// DeepSpeed runs and [{"micro", "rank", "loss"}] for the baselines).
	Micro [][]float64 `json:"-"`
}

func (s *StepRecord) UnmarshalJSON(b []byte) error {
	type plain StepRecord
	var aux struct {
		plain
		MicroLosses json.RawMessage `json:"micro_losses"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*s = StepRecord(aux.plain)
	m := bytes.TrimSpace(aux.MicroLosses)
	switch {
	case len(m) == 0 || string(m) == "null":
	case m[0] == '{':
		var byRank map[string][]float64
		if err := json.Unmarshal(m, &byRank); err != nil {
			return fmt.Errorf("micro_losses: %w", err)
		}
		for k, v := range byRank {
			var r int
			if _, err := fmt.Sscanf(k, "rank%d", &r); err != nil || r < 0 || r > 1<<16 {
				return fmt.Errorf("micro_losses: key %q is not rank<N>", k)
			}
			s.setMicro(r, -1, v)
		}
	case m[0] == '[':
		var list []struct {
			Micro, Rank int
			Loss        float64
		}
		if err := json.Unmarshal(m, &list); err != nil {
			return fmt.Errorf("micro_losses: %w", err)
		}
		for _, e := range list {
			if e.Rank < 0 || e.Micro < 0 || e.Rank > 1<<16 || e.Micro > 1<<16 {
				return fmt.Errorf("micro_losses: rank %d, micro %d", e.Rank, e.Micro)
			}
			s.setMicro(e.Rank, e.Micro, []float64{e.Loss})
		}
	default:
		return fmt.Errorf("micro_losses: want an object or a list")
	}
	return nil
}

// setMicro stores v as rank r's losses (micro < 0) or as one micro-step.
func (s *StepRecord) setMicro(r, micro int, v []float64) {
	for len(s.Micro) <= r {
		s.Micro = append(s.Micro, nil)
	}
	if micro < 0 {
		s.Micro[r] = v
		return
	}
	for len(s.Micro[r]) <= micro {
		s.Micro[r] = append(s.Micro[r], 0)
	}
	s.Micro[r][micro] = v[0]
}

// Files of a case directory.
const (
	ResultFile = "result.json"
	MetaFile   = "case.json"
	FinalFile  = "final_fp32.safetensors"
	ModelsFile = "models.json"
)

// Find returns every case directory under the roots (a directory holding
// a result.json, or a facts.json; a root may itself be one), sorted, with
// its name relative to its root.
func Find(roots ...string) ([]Case, error) {
	var out []Case
	for _, root := range roots {
		n := len(out)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "ckpt" && path != root {
				return filepath.SkipDir // DeepSpeed's checkpoint directories
			}
			if d.IsDir() || (d.Name() != ResultFile && d.Name() != FactsFile) {
				return nil
			}
			dir := filepath.Dir(path)
			name, err := filepath.Rel(root, dir)
			if err != nil {
				return err
			}
			if name == "." {
				name = filepath.Base(filepath.Clean(dir))
			}
			out = append(out, Case{Name: filepath.ToSlash(name), Dir: dir, Facts: d.Name() == FactsFile})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("finding cases under %s: %w", root, err)
		}
		if len(out) == n {
			return nil, fmt.Errorf("%s: no cases (no %s or %s below it)", root, ResultFile, FactsFile)
		}
	}
	slices.SortStableFunc(out, func(a, b Case) int { return strings.Compare(a.Dir, b.Dir) })
	return out, nil
}

// Load reads the case's result.json, case.json and finds its init
// directory.
func (c *Case) Load() error {
	raw, err := os.ReadFile(filepath.Join(c.Dir, ResultFile))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &c.Result); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(c.Dir, ResultFile), err)
	}
	if raw, err := os.ReadFile(filepath.Join(c.Dir, MetaFile)); err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.Meta); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(c.Dir, MetaFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if c.Meta.Init != "" {
		c.InitDir = c.Meta.Init
		if !filepath.IsAbs(c.InitDir) {
			c.InitDir = filepath.Join(c.Dir, c.Meta.Init)
		}
		return nil
	}
	for dir := c.Dir; ; {
		for _, cand := range []string{filepath.Join(dir, "init"), dir} {
			if _, err := os.Stat(filepath.Join(cand, ModelsFile)); err == nil {
				c.InitDir = cand
				return nil
			}
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	return fmt.Errorf("%s: no init/%s in it or above it; name its directory in %s (\"init\")", c.Dir, ModelsFile, MetaFile)
}

// ModelKey is the case's key in models.json.
func (c *Case) ModelKey() string {
	if c.Meta.Model != "" {
		return c.Meta.Model
	}
	return c.Result.Model
}

// DSConfig is the case's ds_config: result.json's, or case.json's.
func (c *Case) DSConfig() json.RawMessage {
	if len(c.Result.DSConfig) > 0 && string(c.Result.DSConfig) != "null" {
		return c.Result.DSConfig
	}
	return c.Meta.DSConfig
}

// WorldSize is case.json's world_size, or the number of ranks in the
// per-step micro-step records.
func (c *Case) WorldSize() int {
	if c.Meta.WorldSize > 0 {
		return c.Meta.WorldSize
	}
	n := 0
	for _, s := range c.Result.Steps {
		n = max(n, len(s.Micro))
	}
	return n
}

// finalWeights finds the file of the run's final fp32 weights: its own, or
// that of the run named by final_fp32_identical_to (a sibling directory),
// following such pointers up to a few hops.
func (c *Case) finalWeights() (string, error) {
	dir, res := c.Dir, c.Result
	for hop := 0; hop < 8; hop++ {
		p := filepath.Join(dir, FinalFile)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if res.FinalIdenticalTo == "" {
			return "", fmt.Errorf("no %s in %s and no final_fp32_identical_to", FinalFile, dir)
		}
		dir = filepath.Join(filepath.Dir(dir), res.FinalIdenticalTo)
		raw, err := os.ReadFile(filepath.Join(dir, ResultFile))
		res = Result{}
		if err == nil {
			_ = json.Unmarshal(raw, &res)
		} else if _, serr := os.Stat(filepath.Join(dir, FinalFile)); serr != nil {
			return "", fmt.Errorf("final_fp32_identical_to %q: %w", filepath.Base(dir), serr)
		}
	}
	return "", fmt.Errorf("final_fp32_identical_to: a chain of more than 8 runs from %s", c.Dir)
}
