package dsconfig

import (
	"fmt"

	"github.com/dszero/dszero/device"
)

// OneBit is the params of DeepSpeed's 1-bit optimizers
// (runtime/fp16/onebit/{adam,zoadam,lamb}.py) that dszero reads; the
// Adam ones (lr, betas, eps, weight_decay, bias_correction) are in
// Optimizer.
type OneBit struct {
	FreezeStep      int64  // freeze_step (OnebitAdam, OnebitLamb; default 100000)
	CommBackendName string // comm_backend_name: "nccl" (default), "mpi", "hccl" or "compressed"
	CudaAware       bool   // cuda_aware (the MPI backend's; dszero's backends ignore it)
	EpsInsideSqrt   bool   // eps_inside_sqrt (stored by DeepSpeed, not used by its update)

	VarFreezeStep    int64 // ZeroOneAdam's var_freeze_step (100000)
	VarUpdateScaler  int64 // var_update_scaler (16)
	LocalStepScaler  int64 // local_step_scaler (32678)
	LocalStepClipper int64 // local_step_clipper (16)

	CoeffBeta       float64 // OnebitLamb's coeff_beta (0.9); max_coeff and min_coeff are Optimizer's
	FactorMax       float64 // factor_max (4)
	FactorMin       float64 // factor_min (0.5)
	FactorThreshold float64 // factor_threshold (0.1)
}

// The keyword arguments of the 1-bit optimizers' constructors (besides
// params and deepspeed), DeepSpeed 0.14.5.
var oneBitKwargs = map[string][]string{
	"onebitadam": {"lr", "freeze_step", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay",
		"max_grad_norm", "amsgrad", "cuda_aware", "comm_backend_name"},
	"zerooneadam": {"lr", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay", "max_grad_norm",
		"var_freeze_step", "var_update_scaler", "local_step_scaler", "local_step_clipper", "amsgrad", "cuda_aware",
		"comm_backend_name"},
	"onebitlamb": {"lr", "freeze_step", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay",
		"max_grad_norm", "max_coeff", "min_coeff", "amsgrad", "cuda_aware", "comm_backend_name", "coeff_beta",
		"factor_max", "factor_min", "factor_threshold"},
}

// readOneBit reads a 1-bit optimizer's params with DeepSpeed's rules: ZeRO
// stage 0 only (the engine asserts "1bit-Adam is not compatible with
// ZeRO"), no AMSGrad (RuntimeError), a known comm backend (any other
// leaves the backend None and fails), and the constructor's keywords.
func (c *compiler) readOneBit(tf *field, pb *block, name string) {
	o := &c.plan.Optimizer
	labels := map[string]string{"onebitadam": "1bit-Adam", "zerooneadam": "0/1 Adam", "onebitlamb": "1bit-Lamb"}
	o.Impl = map[string]string{"onebitadam": "OnebitAdam", "zerooneadam": "ZeroOneAdam", "onebitlamb": "OnebitLamb"}[name]
	c.adamParams(pb, 0, 1e-3, [2]float64{0.9, 0.999}, 1e-8)
	if c.plan.Zero.Stage > 0 {
		c.s.errorf(tf.v, "optimizer.type", fmt.Sprintf("use ZeRO stage 0 with %s, or Adam/AdamW with ZeRO", labels[name]),
			"%s is not compatible with ZeRO (stage %d)", labels[name], c.plan.Zero.Stage)
	}
	o.BiasCorrection = pb.get("bias_correction").Bool(true)
	b := &o.OneBit
	if name != "zerooneadam" {
		b.FreezeStep = pb.get("freeze_step").Int(100000, 0)
	} else {
		b.VarFreezeStep = pb.get("var_freeze_step").Int(100000, 0)
		b.VarUpdateScaler = pb.get("var_update_scaler").Int(16, 0)
		b.LocalStepScaler = pb.get("local_step_scaler").Int(32678, 0)
		// Its interval min(clipper, 2·interval) divides the step count.
		b.LocalStepClipper = pb.get("local_step_clipper").Int(16, 1)
	}
	if name == "onebitlamb" {
		o.MaxCoeff = pb.get("max_coeff").Float(10)
		o.MinCoeff = pb.get("min_coeff").Float(0.01)
		b.CoeffBeta = pb.get("coeff_beta").Float(0.9)
		b.FactorMax = pb.get("factor_max").Float(4)
		b.FactorMin = pb.get("factor_min").Float(0.5)
		b.FactorThreshold = pb.get("factor_threshold").Float(0.1)
		if c.plan.Precision.LossScale != 0 {
			c.s.errorf(c.at("fp16.loss_scale"), "fp16.loss_scale", "set fp16.loss_scale to 0 (dynamic)",
				"DeepSpeed's onebitlamb optimizer requires dynamic loss scaling")
		}
		if c.plan.Precision.DType == device.F16 {
			c.s.unsupportedf(c.at("fp16"), "fp16", "train 1-bit Lamb in fp32 with dszero",
				"1-bit Lamb under fp16 (DeepSpeed wraps it in FP16_UnfusedOptimizer, per-parameter fp32 copies) is not run by dszero")
		}
	}
	b.EpsInsideSqrt = pb.get("eps_inside_sqrt").Bool(false)
	b.CudaAware = pb.get("cuda_aware").Bool(false)
	b.CommBackendName = pb.get("comm_backend_name").Enum("nccl", "nccl", "mpi", "hccl", "compressed")
	if af := pb.get("amsgrad"); af.Bool(false) {
		af.errorf("remove amsgrad", "%s does not support the AMSGrad variant (DeepSpeed raises RuntimeError)", labels[name])
	}
	c.checkKwargs(pb, o.Impl, oneBitKwargs[name], "max_grad_norm")
	if c.plan.Precision.DType == device.BF16 {
		// BF16_Optimizer partitions its fp32 master across the ranks and
		// steps each rank's partition: the momentum each rank would
		// compress is of a different slice.
		c.s.unsupportedf(c.at("bf16"), "bf16", fmt.Sprintf("train %s in fp16 (as DeepSpeed verifies it) or fp32", labels[name]),
			"%s under bf16 (DeepSpeed wraps it in BF16_Optimizer, which partitions the master weights across the ranks) is not run by dszero", labels[name])
	}
}
