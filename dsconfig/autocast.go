package dsconfig

import "github.com/dszero/dszero/dsconfig/lenient"

// autocastDTypes are DeepSpeed's DtypeEnum values (runtime/config.py),
// which torch_autocast.dtype is looked up in, and the dtype each names.
var autocastDTypes = map[string]string{
	"torch.float16": "fp16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
	"torch.float32": "fp32", "fp32": "fp32", "float32": "fp32", "float": "fp32",
	"torch.int8": "int8", "int8": "int8",
	"torch.bfloat16": "bf16", "bf16": "bf16", "bfloat16": "bf16",
}

// readTorchAutocast reads the torch_autocast block as DeepSpeed 0.19.5's
// DeepSpeedConfig does — dtype and lower_precision_safe_modules are
// parsed, and refused when malformed, whether or not the block is
// enabled — and refuses an enabled block by name.
//
// What DeepSpeed runs (runtime/torch_autocast.py, engine.py): the
// parameters stay fp32 (the bf16/fp16 blocks stay off); every forward
// runs inside torch.autocast(device_type=the accelerator, dtype), so each
// op in that device's lower-precision list (linear, matmul, bmm, conv,
// scaled_dot_product_attention...) casts its inputs and weights to dtype
// and returns dtype, and every op after it that is in neither list runs in
// the dtype its inputs arrive in, forward and backward; the parameters of
// the lower_precision_safe_modules (default torch.nn.Linear and Conv1d-3d)
// get comm_dtype = dtype, so ZeRO reduces their gradients in dtype, in
// buckets of their own; fp16 adds a torch.amp.GradScaler. dszero's models
// fix one dtype per run and have no per-op dtype flow, and the lists are
// per device (CUDA's differ from the CPU's), so dszero refuses the block
// rather than train with other numbers.
func (c *compiler) readTorchAutocast() {
	p := &c.plan.Precision
	ta := c.at("torch_autocast")
	if ta == nil || ta.Kind != lenient.Object {
		return
	}
	if d, ok := ta.Get("dtype"); ok {
		name, known := "", false
		if d.Kind == lenient.String {
			name, known = autocastDTypes[d.Str]
		}
		if !known {
			c.s.errorf(d, "torch_autocast.dtype", `use "bf16" or "fp16"`, "Invalid dtype for torch autocast: %s (DeepSpeed's ValueError: not a DtypeEnum value)", describe(d))
		}
		p.TorchAutocastDType = name
	}
	if m, ok := ta.Get("lower_precision_safe_modules"); ok {
		bad := m.Kind != lenient.Array
		for _, e := range m.Elems {
			bad = bad || e.Kind != lenient.String
		}
		if bad {
			c.s.errorf(m, "torch_autocast.lower_precision_safe_modules", `write a list of class names, e.g. ["torch.nn.Linear"]`,
				"Invalid module names for torch autocast: %s. Expected list of strings.", describe(m))
		}
	}
	e, ok := ta.Get("enabled")
	if !ok || !truthy(e) {
		return
	}
	p.TorchAutocast = true
	dtype := p.TorchAutocastDType
	if dtype == "" {
		dtype = "the device's default (fp16 on CUDA, bf16 on the CPU)"
	}
	var fix []string
	switch p.TorchAutocastDType {
	case "", "bf16":
		fix = append(fix, `"bf16": {"enabled": true}`)
	case "fp16":
		fix = append(fix, `"fp16": {"enabled": true}`)
	}
	how := "remove the block or set enabled to false"
	if len(fix) > 0 {
		how = "use " + fix[0] + " instead (bf16/fp16 parameters throughout, which dszero runs), or set torch_autocast.enabled to false"
	}
	c.s.unsupportedf(e, "torch_autocast.enabled", how,
		"torch.autocast mixed precision (dtype %s) is not supported by dszero: DeepSpeed keeps fp32 parameters and runs each forward under torch.autocast, where the device's lower-precision ops (linear, matmul, conv, attention) compute in that dtype and the ops after them in whatever dtype reaches them, forward and backward, and it reduces the gradients of lower_precision_safe_modules in that dtype; dszero's models fix one dtype per run and have no per-op dtype flow",
		dtype)
}
