package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/estimate"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/partition"
)

// FactsFile marks a directory of reference facts: values DeepSpeed's own
// classes and functions returned (conformance/reference/facts.py), checked
// against the dszero code that reproduces them.
const FactsFile = "facts.json"

// Fact kinds.
const (
	KindLRSchedule = "lr_schedule"  // scheduler curves: the lr (and betas) each optimizer step runs with
	KindLossScaler = "loss_scaler"  // the dynamic loss scaler's state machine over a run of overflows
	KindEstimator  = "estimator"    // estimate_zero2/3_model_states_mem_needs
	KindZeroToFP32 = "zero_to_fp32" // partition lengths and padding zero_to_fp32 reconstructs from
)

// facts is a facts.json.
type facts struct {
	Kind             string            `json:"kind"`
	DeepSpeedVersion string            `json:"deepspeed_version"`
	TorchVersion     string            `json:"torch_version"`
	Source           string            `json:"source"` // the DeepSpeed code that produced the values
	Command          string            `json:"command"`
	Entries          []json.RawMessage `json:"entries"`
}

// factCheck compares the entries of one kind; each mismatch is a problem
// naming its entry.
type factCheck struct {
	m        Metric
	problems []string
}

func (f *factCheck) exact(entry, what string, got, want float64) {
	f.m.add(got, want)
	if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
		f.problems = append(f.problems, fmt.Sprintf("%s: %s = %v, DeepSpeed %v", entry, what, got, want))
	}
}

func (f *factCheck) rel(entry, what string, got, want, tol float64) {
	f.m.add(got, want)
	if d := math.Abs(got - want); d > tol*math.Abs(want) {
		f.problems = append(f.problems, fmt.Sprintf("%s: %s = %v, DeepSpeed %v", entry, what, got, want))
	}
}

func (f *factCheck) fail(entry string, err error) {
	f.problems = append(f.problems, fmt.Sprintf("%s: %v", entry, err))
}

// runFacts checks a directory of reference facts.
func runFacts(c Case, rep *Report) {
	fail := func(st Status, err error) {
		rep.Status, rep.Reason = st, err.Error()
	}
	raw, err := os.ReadFile(filepath.Join(c.Dir, FactsFile))
	if err != nil {
		fail(Error, err)
		return
	}
	var f facts
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		fail(Error, fmt.Errorf("%s: %w", filepath.Join(c.Dir, FactsFile), err))
		return
	}
	rep.Kind = f.Kind
	v, ok := versions[strings.SplitN(f.DeepSpeedVersion, "+", 2)[0]]
	if !ok {
		fail(Unsupported, fmt.Errorf("DeepSpeed version %q: dszero follows 0.14.5 and 0.19.5", f.DeepSpeedVersion))
		return
	}
	check := factCheck{m: Metric{Tol: 0}}
	var run func(json.RawMessage, *factCheck, zero.Version) error
	switch f.Kind {
	case KindLRSchedule:
		check.m = Metric{Tol: lrRel, Rel: true}
		run = lrFact
	case KindLossScaler:
		run = scalerFact
	case KindEstimator:
		run = estimatorFact
	case KindZeroToFP32:
		run = zeroToFP32Fact
	default:
		fail(Unsupported, fmt.Errorf("facts of kind %q: dszero checks %s, %s, %s and %s", f.Kind, KindLRSchedule, KindLossScaler, KindEstimator, KindZeroToFP32))
		return
	}
	for i, e := range f.Entries {
		if err := run(e, &check, v); err != nil {
			check.fail(fmt.Sprintf("entry %d", i), err)
		}
	}
	rep.Facts = check.m
	rep.Steps = len(f.Entries)
	switch {
	case len(check.problems) > 0:
		n := len(check.problems)
		if len(check.problems) > 5 {
			check.problems = append(check.problems[:5], fmt.Sprintf("… %d more", n-5))
		}
		rep.Status, rep.Reason = Fail, fmt.Sprintf("%d differences: %s", n, strings.Join(check.problems, "; "))
	case check.m.N == 0:
		rep.Status, rep.Reason = Fail, "no values compared"
	default:
		rep.Status = Pass
	}
}

// lrRel is the tolerance of learning rates: DeepSpeed computes them in
// Python floats, dszero in float64 with the same formulas.
const lrRel = 1e-12

// plan compiles an entry's ds_config on one rank.
func entryPlan(js json.RawMessage) (dsconfig.Plan, error) {
	return dsconfig.Load(string(js), dsconfig.Options{WorldSize: 1})
}

func lrFact(raw json.RawMessage, f *factCheck, v zero.Version) error {
	var e struct {
		Name     string          `json:"name"`
		DSConfig json.RawMessage `json:"ds_config"`
		LR       []float64       `json:"lr"`
		Betas    [][2]float64    `json:"betas"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return err
	}
	plan, err := entryPlan(e.DSConfig)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	s, err := zero.NewScheduler(plan, v)
	if err != nil || s == nil {
		return fmt.Errorf("%s: scheduler: %v", e.Name, err)
	}
	for i, want := range e.LR {
		f.rel(e.Name, fmt.Sprintf("lr of step %d", i+1), s.LR(), want, lrRel)
		if i < len(e.Betas) {
			b, ok := s.Betas()
			if !ok {
				return fmt.Errorf("%s: DeepSpeed cycles the betas, dszero's scheduler does not", e.Name)
			}
			f.rel(e.Name, fmt.Sprintf("beta1 of step %d", i+1), b[0], e.Betas[i][0], lrRel)
			f.rel(e.Name, fmt.Sprintf("beta2 of step %d", i+1), b[1], e.Betas[i][1], lrRel)
		}
		s.Step()
	}
	return nil
}

func scalerFact(raw json.RawMessage, f *factCheck, v zero.Version) error {
	var e struct {
		Name     string          `json:"name"`
		DSConfig json.RawMessage `json:"ds_config"`
		Events   []struct {
			Overflow bool     `json:"overflow"`
			Scale    *float64 `json:"scale"`
			Error    string   `json:"error"`
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return err
	}
	plan, err := entryPlan(e.DSConfig)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	s, err := zero.NewLossScaler(plan, v)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	for i, ev := range e.Events {
		err := s.Update(ev.Overflow)
		switch {
		case ev.Error != "" && err == nil:
			f.fail(e.Name, fmt.Errorf("update %d: DeepSpeed raised %q, dszero went on at scale %v", i+1, ev.Error, s.Scale()))
			return nil
		case ev.Error != "":
			f.exact(e.Name, fmt.Sprintf("error at update %d", i+1), 1, 1)
			return nil
		case err != nil:
			f.fail(e.Name, fmt.Errorf("update %d: %v; DeepSpeed went on at scale %v", i+1, err, ev.Scale))
			return nil
		case ev.Scale == nil:
			return fmt.Errorf("%s: update %d records no scale", e.Name, i+1)
		}
		f.exact(e.Name, fmt.Sprintf("scale after update %d", i+1), s.Scale(), *ev.Scale)
	}
	return nil
}

func estimatorFact(raw json.RawMessage, f *factCheck, _ zero.Version) error {
	var e struct {
		Fn               string  `json:"fn"`
		Total            int64   `json:"total_params"`
		Largest          int64   `json:"largest_layer_params"`
		GPUsPerNode      int     `json:"num_gpus_per_node"`
		Nodes            int     `json:"num_nodes"`
		CPUOffload       bool    `json:"cpu_offload"`
		CPUOffloadParams bool    `json:"cpu_offload_params"`
		ZeroInit         bool    `json:"zero_init"`
		BufferFactor     float64 `json:"additional_buffer_factor"`
		CPU, GPU         int64
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return err
	}
	h := estimate.Hardware{GPUsPerNode: e.GPUsPerNode, Nodes: e.Nodes, BufferFactor: e.BufferFactor}
	var cpu, gpu int64
	name := fmt.Sprintf("%s(%d params, %d×%d GPUs, offload %v/%v, zero_init %v, factor %g)", e.Fn, e.Total, e.Nodes, e.GPUsPerNode,
		e.CPUOffload, e.CPUOffloadParams, e.ZeroInit, e.BufferFactor)
	switch e.Fn {
	case "zero2":
		cpu, gpu = estimate.Zero2ModelStates(e.Total, h, e.CPUOffload)
	case "zero3":
		cpu, gpu = estimate.Zero3ModelStates(e.Total, e.Largest, h, e.CPUOffload, e.CPUOffloadParams, e.ZeroInit)
	default:
		return fmt.Errorf("estimator %q: want zero2 or zero3", e.Fn)
	}
	f.exact(name, "cpu bytes", float64(cpu), float64(e.CPU))
	f.exact(name, "gpu bytes", float64(gpu), float64(e.GPU))
	return nil
}

func zeroToFP32Fact(raw json.RawMessage, f *factCheck, _ zero.Version) error {
	var e struct {
		Stage          int      `json:"stage"`
		World          int      `json:"world"`
		Numels         []int    `json:"numels"`
		SavedLengths   []int    `json:"saved_lengths"`
		ParamsFromFlat [][2]int `json:"params_from_flat"`
		Numel          int      `json:"numel"`
		Partitioned    int      `json:"partitioned_numel"`
		Padding        int      `json:"padding"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return err
	}
	if e.World < 1 {
		return errors.New("world must be ≥ 1")
	}
	switch e.Stage {
	case 1, 2:
		if len(e.SavedLengths) != e.World || len(e.ParamsFromFlat) != len(e.Numels) {
			return fmt.Errorf("stage %d, world %d: %d saved lengths and %d params for %d numels", e.Stage, e.World, len(e.SavedLengths), len(e.ParamsFromFlat), len(e.Numels))
		}
		ps := make([]partition.Param, len(e.Numels))
		for i, n := range e.Numels {
			if n < 0 {
				return fmt.Errorf("numel %d", n)
			}
			ps[i] = partition.Param{Name: fmt.Sprint(i), Numel: n}
		}
		l := partition.Flat(ps, e.World)
		name := fmt.Sprintf("stage %d, world %d, numels %v", e.Stage, e.World, e.Numels)
		for r := range e.World {
			f.exact(name, fmt.Sprintf("rank %d's saved length", r), float64(l.SavedLen(r)), float64(e.SavedLengths[r]))
		}
		for i, p := range ps {
			f.exact(name, fmt.Sprintf("param %d's start in the flat buffer", i), float64(l.Offsets[i]), float64(e.ParamsFromFlat[i][0]))
			f.exact(name, fmt.Sprintf("param %d's end", i), float64(l.Offsets[i]+p.Numel), float64(e.ParamsFromFlat[i][1]))
		}
	case 3:
		if e.Numel < 0 {
			return fmt.Errorf("numel %d", e.Numel)
		}
		name := fmt.Sprintf("stage 3, world %d, numel %d", e.World, e.Numel)
		f.exact(name, "partitioned numel", float64(partition.ParamPartitionSize(e.Numel, e.World)), float64(e.Partitioned))
		f.exact(name, "padding", float64(partition.ParamPadding(e.Numel, e.World)), float64(e.Padding))
	default:
		return fmt.Errorf("stage %d: want 1, 2 or 3", e.Stage)
	}
	return nil
}
