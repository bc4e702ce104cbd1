package ptfile

import (
	"fmt"
	"slices"
	"strings"
)

// Options say which classes a read accepts beyond the core allow-list.
// The zero value accepts what torch.load(weights_only=True) accepts of
// checkpoint data (tensors, storages, OrderedDict, torch.Size, sets, dtypes,
// torch.device); nothing ever runs code from the file.
type Options struct {
	// DeepSpeed accepts the classes DeepSpeed (0.14 to 0.19) pickles into
	// its checkpoints, kept as opaque Objects: LossScaler,
	// DynamicLossScaler, ZeroStageEnum and fragment_address (DeepSpeedClasses).
	DeepSpeed bool
	// Classes lists further "module.Name" classes to keep as opaque Objects
	// ("argparse.Namespace"). Python 2 module names (__builtin__,
	// copy_reg) are written with their Python 3 names (builtins, copyreg).
	Classes []string
	// MaxValues bounds the values the pickle expands to, a value reached
	// through several shared references counted each time, so that a few
	// kilobytes cannot describe 2^60 values for a caller to walk ("billion
	// laughs"). It also bounds the values the pickle machine builds on
	// its way there, each push counted, so that the memory a read takes
	// is bounded too. 0 means 1<<24; real DeepSpeed files hold under 10^5.
	MaxValues int64
	// MaxPickleBytes bounds data.pkl's size, checked before it is read: a
	// compressed entry of a few megabytes can inflate to gigabytes. 0
	// means 64 MiB; real checkpoints' pickles are kilobytes to a few
	// megabytes, their tensors being stored beside it.
	MaxPickleBytes int64
}

// DefaultMaxPickleBytes is MaxPickleBytes' default.
const DefaultMaxPickleBytes = 64 << 20

// DeepSpeedClasses are the classes Options.DeepSpeed accepts. The reference
// DeepSpeed 0.14.5 checkpoints hold the first, third and fourth;
// DynamicLossScaler is what fp16 runs with dynamic loss scaling save.
var DeepSpeedClasses = []string{
	"deepspeed.runtime.fp16.loss_scaler.LossScaler",
	"deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
	"deepspeed.runtime.zero.config.ZeroStageEnum",
	"deepspeed.utils.tensor_fragment.fragment_address",
}

// role is what the reader does with a global: rebuild something it models,
// or keep an instance opaque.
type role uint8

const (
	roleOpaque       role = iota + 1 // an allowed class: instances become Objects
	roleRebuildV2                    // torch._utils._rebuild_tensor_v2
	roleRebuild                      // torch._utils._rebuild_tensor (older files)
	roleRebuildParam                 // torch._utils._rebuild_parameter
	roleOrderedDict                  // collections.OrderedDict
	roleSet                          // builtins.set
	roleSize                         // torch.Size
	roleGetattr                      // builtins.getattr, only as getattr(allowed class, "member")
	roleEncode                       // _codecs.encode: how protocol 2 pickles bytes
	roleStorage                      // torch.FloatStorage...: only inside a storage's persistent id
	roleDType                        // torch.float32...: a dtype value
)

// global is a GLOBAL opcode's result: an allowed name and what it does.
type global struct {
	module, name string
	role         role
	dtype        DType // roleStorage, roleDType
}

func (g *global) String() string { return g.module + "." + g.name }

var coreGlobals = func() map[string]*global {
	m := map[string]*global{}
	add := func(full string, r role, dt DType) {
		i := strings.LastIndexByte(full, '.')
		m[full] = &global{module: full[:i], name: full[i+1:], role: r, dtype: dt}
	}
	add("torch._utils._rebuild_tensor_v2", roleRebuildV2, 0)
	add("torch._utils._rebuild_tensor", roleRebuild, 0)
	add("torch._utils._rebuild_parameter", roleRebuildParam, 0)
	add("collections.OrderedDict", roleOrderedDict, 0)
	add("builtins.set", roleSet, 0)
	add("torch.Size", roleSize, 0)
	add("builtins.getattr", roleGetattr, 0)
	add("_codecs.encode", roleEncode, 0)
	add("builtins.bytes", roleEncode, 0)
	add("torch.device", roleOpaque, 0)
	for d := Float32; d.valid(); d++ {
		add("torch."+d.StorageClass(), roleStorage, d)
		add("torch."+d.String(), roleDType, d)
	}
	return m
}()

// allowList resolves the globals a read may use.
type allowList struct {
	extra     map[string]bool
	maxValues int64
	maxPickle int64
}

func newAllowList(o Options) *allowList {
	a := &allowList{extra: map[string]bool{}, maxValues: o.MaxValues, maxPickle: o.MaxPickleBytes}
	if a.maxValues <= 0 {
		a.maxValues = 1 << 24
	}
	if a.maxPickle <= 0 {
		a.maxPickle = DefaultMaxPickleBytes
	}
	if o.DeepSpeed {
		for _, c := range DeepSpeedClasses {
			a.extra[c] = true
		}
	}
	for _, c := range o.Classes {
		a.extra[c] = true
	}
	return a
}

// fixModule maps Python 2 module names, as protocol 2 pickles spell them,
// to Python 3's (pickle's fix_imports does the same).
func fixModule(m string) string {
	switch m {
	case "__builtin__":
		return "builtins"
	case "copy_reg":
		return "copyreg"
	}
	return m
}

// find returns the global module.name or an error that names the class
// and the option that would accept it.
func (a *allowList) find(module, name string) (*global, error) {
	module = fixModule(module)
	full := module + "." + name
	if g, ok := coreGlobals[full]; ok {
		return g, nil
	}
	if a.extra[full] {
		return &global{module: module, name: name, role: roleOpaque}, nil
	}
	msg := fmt.Sprintf("class %s is not allowed (reading never runs code from a checkpoint)", full)
	if slices.Contains(DeepSpeedClasses, full) {
		return nil, &refusal{msg: msg, option: "DeepSpeed", hint: "set Options.DeepSpeed to keep DeepSpeed's classes as opaque objects"}
	}
	return nil, &refusal{msg: msg, option: "Classes", hint: fmt.Sprintf("if it is plain data, Options.Classes = []string{%q} keeps it as an opaque Object", full)}
}
