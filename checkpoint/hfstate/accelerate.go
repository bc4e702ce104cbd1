package hfstate

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/checkpoint/dcp"
	"github.com/dszero/dszero/ptfile"
)

// Accelerate's names (accelerate/utils/constants.py, fsdp_utils.py,
// checkpointing.py), for model and optimizer index i (0 for the first).

// ModelDir is the SHARDED_STATE_DICT model folder: pytorch_model_fsdp_I,
// a torch.distributed.checkpoint directory of {"model": state_dict}.
func ModelDir(i int) string { return fmt.Sprintf("pytorch_model_fsdp_%d", i) }

// OptimizerDir is the SHARDED_STATE_DICT optimizer folder: optimizer_I,
// a torch.distributed.checkpoint directory of {"optimizer": osd}.
func OptimizerDir(i int) string { return fmt.Sprintf("optimizer_%d", i) }

// FullModelName is the FULL_STATE_DICT model file save_fsdp_model writes
// (rank 0, torch.save of the whole state dict): pytorch_model_fsdp.bin,
// pytorch_model_fsdp_I.bin for I > 0.
func FullModelName(i int) string { return indexed("pytorch_model_fsdp", i, ".bin") }

// FullOptimizerName is the FULL_STATE_DICT optimizer file
// save_fsdp_optimizer writes: optimizer.bin, optimizer_I.bin.
func FullOptimizerName(i int) string { return indexed("optimizer", i, ".bin") }

// AccelerateSchedulerName is save_accelerator_state's scheduler file:
// scheduler.bin, scheduler_I.bin (torch.save of scheduler.state_dict()).
func AccelerateSchedulerName(i int) string { return indexed("scheduler", i, ".bin") }

// SamplerName is the sampler file: sampler.bin, sampler_I.bin (saved only
// for Accelerate's SeedableRandomSampler).
func SamplerName(i int) string { return indexed("sampler", i, ".bin") }

// RandomStatesName is rank's RNG file in save_state: random_states_R.pkl,
// torch.save of {"step", "random_state", "numpy_random_seed",
// "torch_manual_seed", "torch_cuda_manual_seed"...} — Python's, NumPy's and
// torch's generators, which dszero does not use (see rng.go): dszero
// writes none.
func RandomStatesName(rank int) string { return fmt.Sprintf("random_states_%d.pkl", rank) }

// SafeModelName is the safetensors weights file (the Trainer's save_model
// and Accelerate's save_model write model.safetensors).
const SafeModelName = "model.safetensors"

// ModelKey and OptimizerKey are the top-level keys Accelerate wraps the
// state dicts in before dcp.save, so that flat keys read "model.<param>"
// and "optimizer.state.<param>.exp_avg".
const (
	ModelKey     = "model"
	OptimizerKey = "optimizer"
)

func indexed(base string, i int, ext string) string {
	if i == 0 {
		return base + ext
	}
	return fmt.Sprintf("%s_%d%s", base, i, ext)
}

// ModelFQN is the flat key of parameter param in pytorch_model_fsdp_I.
func ModelFQN(param string) string { return ModelKey + "." + param }

// OptimizerFQN is the flat key of parameter param's optimizer state name
// ("step", "exp_avg", "exp_avg_sq") in optimizer_I.
func OptimizerFQN(param, name string) string {
	return OptimizerKey + ".state." + param + "." + name
}

// ParamGroupFQN is the flat key of hyperparameter key of group g.
func ParamGroupFQN(g int, key string) string {
	return fmt.Sprintf("%s.param_groups.%d.%s", OptimizerKey, g, key)
}

// Param is one parameter's tensor under its name in the model
// ("model.layers.0.self_attn.q_proj.weight" for a Llama).
type Param struct {
	Name   string
	Tensor *ptfile.Tensor
}

// ModelState is {"model": {name: tensor, ...}}, what save_fsdp_model hands
// dcp.save.
func ModelState(params []Param) *ptfile.Dict {
	sd := ptfile.NewDict()
	for _, p := range params {
		sd.Set(p.Name, p.Tensor)
	}
	return ptfile.DictOf(ModelKey, sd)
}

// AdamWParam is one parameter's AdamW state: the step count (a
// 0-dimensional float32 tensor in torch's state) and the two moments, of
// the parameter's shape.
type AdamWParam struct {
	Name             string
	Step             float32
	ExpAvg, ExpAvgSq *ptfile.Tensor
}

// AdamWGroup is one param group's hyperparameters and its parameters'
// names.
type AdamWGroup struct {
	LR, InitialLR     float64
	Betas             [2]float64
	Eps, WeightDecay  float64
	Amsgrad, Maximize bool
	Params            []string
}

// OptimizerState is {"optimizer": osd} with osd as FSDP.optim_state_dict
// (FSDP1) and get_optimizer_state_dict (FSDP2) give it for torch.optim.AdamW:
//
//	{"state": {name: {"step": tensor(float32), "exp_avg": ..., "exp_avg_sq": ...}},
//	 "param_groups": [{"lr", "betas", "eps", "weight_decay", "amsgrad",
//	                   "foreach", "maximize", "capturable", "differentiable",
//	                   "fused", "decoupled_weight_decay", "initial_lr",
//	                   "params": [names]}]}
//
// Loading with DefaultLoadPlanner fails on a key the target optimizer has
// and the checkpoint lacks, and ignores the others: so every group holds
// the keys of every torch 2.x release's AdamW (decoupled_weight_decay only
// in the newer ones) and initial_lr (set by an attached LR scheduler, as
// the Trainer's always is).
func OptimizerState(params []AdamWParam, groups []AdamWGroup) *ptfile.Dict {
	state := ptfile.NewDict()
	for _, p := range params {
		state.Set(p.Name, ptfile.DictOf(
			"step", ptfile.FromFloat32(nil, []float32{p.Step}),
			"exp_avg", p.ExpAvg, "exp_avg_sq", p.ExpAvgSq))
	}
	pg := make(ptfile.List, len(groups))
	for i, g := range groups {
		names := make(ptfile.List, len(g.Params))
		for j, n := range g.Params {
			names[j] = n
		}
		pg[i] = ptfile.DictOf(
			"lr", g.LR, "betas", ptfile.Tuple{g.Betas[0], g.Betas[1]}, "eps", g.Eps,
			"weight_decay", g.WeightDecay, "amsgrad", g.Amsgrad, "foreach", nil,
			"maximize", g.Maximize, "capturable", false, "differentiable", false,
			"fused", nil, "decoupled_weight_decay", true, "initial_lr", g.InitialLR,
			"params", names)
	}
	return ptfile.DictOf(OptimizerKey, ptfile.DictOf("state", state, "param_groups", pg))
}

// ReadAdamW reads parameter name's AdamW state from an optimizer_I
// checkpoint, rank's FSDP rows of it at world size world (moments of a
// parameter whose rows the rank does not hold are nil).
func ReadAdamW(c *dcp.Checkpoint, name string, world, rank int) (AdamWParam, error) {
	p := AdamWParam{Name: name}
	step, err := c.ReadTensor(OptimizerFQN(name, "step"))
	if err != nil {
		return p, err
	}
	f, err := step.Float32s()
	if err != nil || len(f) != 1 {
		return p, fmt.Errorf("hfstate: %s: %s is a %s%v, not a step count", c.Dir, OptimizerFQN(name, "step"), step.DType, step.Shape)
	}
	p.Step = f[0]
	for _, m := range []struct {
		key string
		dst **ptfile.Tensor
	}{{"exp_avg", &p.ExpAvg}, {"exp_avg_sq", &p.ExpAvgSq}} {
		t, _, err := c.ReadRows(OptimizerFQN(name, m.key), world, rank)
		if err != nil {
			return p, err
		}
		*m.dst = t
	}
	return p, nil
}

// ParamNames lists the parameters an optimizer_I checkpoint holds state
// for, in its order.
func ParamNames(c *dcp.Checkpoint) []string {
	var out []string
	prefix := OptimizerKey + ".state."
	for _, it := range c.Meta.Items {
		if name, ok := strings.CutPrefix(it.FQN, prefix); ok {
			if base, ok := strings.CutSuffix(name, ".exp_avg"); ok {
				out = append(out, base)
			}
		}
	}
	return out
}

// WriteFullModel writes FULL_STATE_DICT's model file (FullModelName):
// rank 0's torch.save of the whole state dict, an OrderedDict keyed by
// parameter name (no "model." prefix: only the sharded save wraps it).
func WriteFullModel(path string, params []Param) error {
	sd := ptfile.NewOrderedDict()
	for _, p := range params {
		sd.Set(p.Name, p.Tensor)
	}
	return ptfile.Write(path, sd)
}

// WriteFullOptimizer writes FULL_STATE_DICT's optimizer file
// (FullOptimizerName): torch.save of the whole optimizer state dict, in
// OptimizerState's form without the "optimizer" wrapper.
func WriteFullOptimizer(path string, params []AdamWParam, groups []AdamWGroup) error {
	osd, _ := OptimizerState(params, groups).Get(OptimizerKey)
	return ptfile.Write(path, osd)
}
