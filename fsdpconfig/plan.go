package fsdpconfig

import (
	"fmt"
	"math"
)

// Dialect is the kind of FSDP config.
type Dialect int

const (
	// DetectDialect (Options only) decides from the file's keys.
	DetectDialect Dialect = iota
	// Accelerate is an `accelerate config` file: YAML (or JSON) with
	// distributed_type: FSDP and an fsdp_config block, read as
	// `accelerate launch` reads it.
	Accelerate
	// Trainer is HF Trainer's --fsdp_config JSON, read with the --fsdp
	// option string as TrainingArguments reads them.
	Trainer
)

func (d Dialect) String() string {
	switch d {
	case Accelerate:
		return "accelerate"
	case Trainer:
		return "trainer"
	}
	return "detect"
}

// MarshalText writes the dialect's name.
func (d Dialect) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Strategy is FSDP's ShardingStrategy; the integers are torch's enum
// values, which accelerate accepts in place of the names.
type Strategy int

const (
	FullShard        Strategy = 1 // parameters, gradients, optimizer state sharded; parameters resharded after forward
	ShardGradOp      Strategy = 2 // as FullShard, but parameters kept gathered from forward to backward
	NoShard          Strategy = 3 // DDP: everything replicated, gradients all-reduced
	HybridShard      Strategy = 4 // FullShard within a shard group, replicated across groups
	HybridShardZero2 Strategy = 5 // ShardGradOp within a shard group, replicated across groups
)

var strategyNames = [...]string{"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}

func (s Strategy) String() string {
	if s < 1 || int(s) >= len(strategyNames) {
		return fmt.Sprintf("Strategy(%d)", int(s))
	}
	return strategyNames[s]
}

// MarshalText writes the strategy's name.
func (s Strategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Hybrid reports HYBRID_SHARD and HYBRID_SHARD_ZERO2.
func (s Strategy) Hybrid() bool { return s == HybridShard || s == HybridShardZero2 }

// Wrap is FSDP's auto wrap policy: which modules become units, gathered
// and released together.
type Wrap int

const (
	NoWrap          Wrap = iota // the whole model is one unit
	TransformerWrap             // one unit per transformer block class
	SizeWrap                    // modules merged into units of at least min_num_params
)

var wrapNames = [...]string{"NO_WRAP", "TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"}

func (w Wrap) String() string {
	if w < 0 || int(w) >= len(wrapNames) {
		return fmt.Sprintf("Wrap(%d)", int(w))
	}
	return wrapNames[w]
}

// MarshalText writes the policy's name.
func (w Wrap) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// StateDict is FSDP's StateDictType: what a checkpoint holds.
type StateDict int

const (
	FullStateDict    StateDict = 1 // consolidated full weights, written by rank 0
	LocalStateDict   StateDict = 2 // each rank's flat shard as it lies in memory (FSDP1 only)
	ShardedStateDict StateDict = 3 // per-parameter shards with metadata (torch.distributed.checkpoint)
)

var stateDictNames = [...]string{"", "FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"}

func (s StateDict) String() string {
	if s < 1 || int(s) >= len(stateDictNames) {
		return fmt.Sprintf("StateDict(%d)", int(s))
	}
	return stateDictNames[s]
}

// MarshalText writes the name.
func (s StateDict) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Prefetch is FSDP's BackwardPrefetch.
type Prefetch int

const (
	NoPrefetch   Prefetch = 0 // accelerate's NO_PREFETCH (None)
	BackwardPre  Prefetch = 1 // all-gather the next unit before the current unit's gradient computation
	BackwardPost Prefetch = 2 // all-gather the next unit after the current unit's gradient computation
)

var prefetchNames = [...]string{"NO_PREFETCH", "BACKWARD_PRE", "BACKWARD_POST"}

func (p Prefetch) String() string {
	if p < 0 || int(p) >= len(prefetchNames) {
		return fmt.Sprintf("Prefetch(%d)", int(p))
	}
	return prefetchNames[p]
}

// MarshalText writes the name.
func (p Prefetch) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// NoWrapMinNumParams is WrapMinNumParams for NO_WRAP: no unit reaches it,
// so the engine's size-based grouping merges the whole model into one unit.
const NoWrapMinNumParams = math.MaxInt

// Plan is an FSDP config read and mapped onto dszero's engine. It is a
// value; Settings and Diagnostics return copies.
type Plan struct {
	File    string
	Dialect Dialect
	Version int // FSDP 1 (FlatParameter, FullyShardedDataParallel) or 2 (fully_shard, DTensor)

	// What FSDP runs.
	Strategy          Strategy
	Wrap              Wrap
	WrapClasses       []string // TRANSFORMER_BASED_WRAP: the block classes named (or the model's)
	MinNumParams      int      // SIZE_BASED_WRAP: modules merged until they hold this many parameters
	Offload           bool     // parameters and gradients on the host, optimizer step there
	StateDict         StateDict
	MixedPrecision    string // "no", "fp16", "bf16" or "fp8"
	BackwardPrefetch  Prefetch
	ForwardPrefetch   bool
	LimitAllGathers   bool
	UseOrigParams     bool
	CPURAMEfficient   bool // cpu_ram_efficient_loading: rank 0 reads the weights, the others start empty
	SyncModuleStates  bool // rank 0's weights broadcast to every rank at wrap time
	ActivationCkpt    bool // activation_checkpointing: each unit's activations recomputed in backward
	IgnoredModules    string
	NumProcesses      int // ranks in all (accelerate's num_processes counts every machine)
	NumMachines       int
	MachineRank       int
	TensorParallel    int // parallelism_config tp_size (FSDP2); 1 without
	ContextParallel   int // parallelism_config cp_size × sp_size; 1 without
	XLA               bool
	TrainerFSDPOption string // the --fsdp option string the Trainer dialect used

	// The engine's reading. Stage is the ZeRO stage dszero runs (3 for
	// FULL_SHARD, SHARD_GRAD_OP and the hybrids, 0 for NO_SHARD).
	Stage int
	// KeepAfterForward is reshard_after_forward false: each unit's
	// gathered parameters stay from its forward to its backward.
	KeepAfterForward bool
	// WrapMinNumParams is the engine's wrap policy at stage 3: 0 gathers
	// each model unit (embeddings, each block, the head) on its own — the
	// transformer policy; > 0 merges consecutive units until they hold that
	// many parameters; NoWrapMinNumParams makes the whole model one unit.
	WrapMinNumParams int
	// ShardGroupSize is the ranks one copy of the model states is sharded
	// over: NumProcesses, or the group size of a hybrid strategy.
	ShardGroupSize int
	// ReplicaGroups is NumProcesses / ShardGroupSize: more than one means
	// hybrid sharding (replicate across groups; the engine's shard groups,
	// as DeepSpeed's MiCS).
	ReplicaGroups int

	settings []Setting
	diags    Diagnostics
}

// Hybrid reports whether the plan shards within groups and replicates
// across them (more than one replica group).
func (p Plan) Hybrid() bool { return p.Strategy.Hybrid() && p.ReplicaGroups > 1 }

// Settings returns every resolved knob with its provenance.
func (p Plan) Settings() []Setting { return append([]Setting(nil), p.settings...) }

// Diagnostics returns every finding, sorted by position.
func (p Plan) Diagnostics() Diagnostics { return append(Diagnostics(nil), p.diags...) }

// Unsupported lists what the config asks for that dszero does not run yet.
func (p Plan) Unsupported() Diagnostics { return p.diags.Filter(Unsupported) }
