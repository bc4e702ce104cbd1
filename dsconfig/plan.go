package dsconfig

import "github.com/dszero/dszero/device"

// Plan is the resolved, validated form of a ds_config: every knob the engine
// reads, with DeepSpeed 0.19.5's defaults applied. It is a value: the engine
// receives a copy and nothing in it aliases the raw JSON. Slices in it are
// copies; Settings returns a fresh copy each call.
type Plan struct {
	File      string // where the config came from ("<string>" for JSON or base64 input)
	WorldSize int    // data-parallel world size the batch arithmetic used
	Mode      Mode   // DeepSpeed semantics or HF-Trainer "auto" filling

	Batch     Batch
	Zero      Zero
	Precision Precision
	Optimizer Optimizer
	Scheduler Scheduler

	GradientClipping        float64 // 0 disables; DeepSpeed ≥ 0.19.3 defaults to 1.0
	PrescaleGradients       bool
	GradientPredivideFactor float64
	GradientAllreduceOp     string // "mean" (default) or "sum"
	CommunicationDataType   string // "" (the model's dtype), "fp16", "bf16" or "fp32"
	SequenceParallelSize    int64  // 1 unless set (Ulysses)

	StepsPerPrint      int64 // 0: never (DeepSpeed ≥ 0.16 default null)
	WallClockBreakdown bool
	MemoryBreakdown    bool
	DumpState          bool

	ZeroAllowUntestedOptimizer bool
	ZeroForceDSCPUOptimizer    bool

	ActivationCheckpointing ActivationCheckpointing
	AIO                     AIO
	Checkpoint              Checkpoint
	DataTypes               DataTypes
	Monitors                Monitors
	FlopsProfiler           FlopsProfiler
	CommsLogger             CommsLogger
	ProgressiveLayerDrop    ProgressiveLayerDrop
	Curriculum              Curriculum
	DataloaderDropLast      bool

	settings []Setting
	diags    Diagnostics
	elastic  bool // elasticity.enabled: the batch triplet is DeepSpeed's to choose
}

// Mode selects how "auto" is treated.
type Mode int

const (
	// DeepSpeedMode reads the file as deepspeed.initialize would: "auto"
	// inside pydantic blocks falls back to the default, elsewhere it is an
	// error.
	DeepSpeedMode Mode = iota
	// HFMode fills "auto" from HF training arguments first, like
	// transformers' HfTrainerDeepSpeedConfig, with its mismatch errors.
	HFMode
)

func (m Mode) String() string {
	if m == HFMode {
		return "hf"
	}
	return "deepspeed"
}

// MarshalText writes the mode's name.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// DataParallelSize is the world size the batch arithmetic divides by:
// WorldSize / sequence_parallel_size.
func (p Plan) DataParallelSize() int64 {
	if p.SequenceParallelSize > 1 {
		return int64(p.WorldSize) / p.SequenceParallelSize
	}
	return int64(p.WorldSize)
}

// Settings returns every resolved knob with its provenance, in the order the
// config was read.
func (p Plan) Settings() []Setting { return append([]Setting(nil), p.settings...) }

// Diagnostics returns the warnings, unsupported-feature notes and infos
// found while reading (a Plan is only returned without errors).
func (p Plan) Diagnostics() Diagnostics { return append(Diagnostics(nil), p.diags...) }

// Unsupported lists the features the config asks for that dszero does not
// run yet.
func (p Plan) Unsupported() Diagnostics { return p.diags.Filter(Unsupported) }

// Batch is DeepSpeed's batch triplet after derivation. In a plan without
// errors and without Unsupported diagnostics every count is in
// [1, 2^31−1] and TrainBatchSize = micro × accumulation × DataParallelSize.
// A count beyond int64 that DeepSpeed accepts (it reads Python integers) is
// 0 here, with an Unsupported diagnostic; Settings records it exactly.
type Batch struct {
	TrainBatchSize            int64 // global batch: micro × accumulation × world
	TrainMicroBatchSizePerGPU int64
	GradientAccumulationSteps int64
}

// Zero is the zero_optimization block.
type Zero struct {
	Stage                         int
	ContiguousGradients           bool
	ReduceScatter                 bool
	ReduceBucketSize              int64
	UseMultiRankBucketAllreduce   bool
	AllgatherPartitions           bool
	AllgatherBucketSize           int64
	OverlapComm                   bool // resolved: null means true iff stage 3
	LoadFromFP32Weights           bool
	ElasticCheckpoint             bool
	OffloadParam                  OffloadParam
	OffloadOptimizer              OffloadOptimizer
	SubGroupSize                  int64
	PrefetchBucketSize            int64 // stage3_prefetch_bucket_size
	ParamPersistenceThreshold     int64 // stage3_param_persistence_threshold
	ModelPersistenceThreshold     int64 // stage3_model_persistence_threshold
	MaxLiveParameters             int64 // stage3_max_live_parameters
	MaxReuseDistance              int64 // stage3_max_reuse_distance
	Gather16BitWeightsOnModelSave bool  // stage3_gather_16bit_weights_on_model_save
	ModuleGranularityThreshold    int64
	UseAllReduceForFetchParams    bool
	AllgatherSequential           bool
	IgnoreUnusedParameters        bool
	RoundRobinGradients           bool
	HPZPartitionSize              int64 // zero_hpz_partition_size (ZeRO++ hpZ)
	QuantizedWeights              bool
	QuantizedNontrainableWeights  bool
	QuantizedGradients            bool
	LoCo                          bool // zeropp_loco_param is present (LoCo, for qgZ)
	MiCSShardSize                 int64
	MiCSHierarchicalParamsGather  bool
	MemoryEfficientLinear         bool
	PipelineLoadingCheckpoint     bool
	OverrideModuleApply           bool
	LogTraceCacheWarnings         bool
	EnableSanityChecks            bool
	SaveMuonMomentumBufferInMem   bool
	ZenFlow                       bool // a zenflow block is present
}

// OffloadDevice is where a partition is offloaded.
type OffloadDevice string

const (
	OffloadNone OffloadDevice = "none"
	OffloadCPU  OffloadDevice = "cpu"
	OffloadNVMe OffloadDevice = "nvme"
)

// OffloadParam is zero_optimization.offload_param (stage 3 only).
type OffloadParam struct {
	Device      OffloadDevice
	NVMePath    string
	BufferCount int64
	BufferSize  int64
	MaxInCPU    int64
	PinMemory   bool
}

// OffloadOptimizer is zero_optimization.offload_optimizer (stages 1–3).
type OffloadOptimizer struct {
	Device           OffloadDevice
	NVMePath         string
	BufferCount      int64
	PinMemory        bool
	PipelineRead     bool
	PipelineWrite    bool
	FastInit         bool
	Ratio            float64
	SuperOffload     bool
	CPUAdamCoresPerc float64
}

// Precision is the fp16 / bf16 / amp configuration.
type Precision struct {
	DType device.DType // F32, F16 or BF16: the dtype of parameters and activations

	// fp16
	FP16AutoCast              bool
	LossScale                 float64 // 0: dynamic
	InitialScalePower         int64
	LossScaleWindow           int64
	Hysteresis                int64
	ConsecutiveHysteresis     bool
	MinLossScale              int64
	FP16MasterWeightsAndGrads bool
	// DynamicArgsGiven says the fp16 block sets at least one of
	// initial_scale_power, loss_scale_window, min_loss_scale, hysteresis
	// and consecutive_hysteresis. Up to DeepSpeed 0.17 the ZeRO optimizers'
	// scaler used DynamicLossScaler's own defaults otherwise (initial scale
	// 2^32, hysteresis 1): runtime/config.py get_dynamic_loss_scale_args
	// returned None.
	DynamicArgsGiven          bool
	BF16ImmediateGradUpdate   bool
	BF16CheckGradOverflow     bool
	BF16MasterWeightsAndGrads bool
	BF16OptimizerStates       bool
	AMP                       bool // Apex AMP (not supported)
	TorchAutocast             bool
	TorchAutocastDType        string
}

// DynamicLossScale reports whether fp16 uses a dynamic loss scale.
func (p Precision) DynamicLossScale() bool { return p.DType == device.F16 && p.LossScale == 0 }

// Optimizer is the optimizer block with typed params.
type Optimizer struct {
	Type string // as DeepSpeed resolves it: DeepSpeed names lower-cased ("adamw"), torch names as written ("SGD"); "" when absent
	// Impl names the implementation DeepSpeed would build: "torch.optim.AdamW",
	// "FusedAdam", "DeepSpeedCPUAdam", "FusedLamb", "torch.optim.SGD", ...
	Impl string

	LR    float64
	Betas [2]float64
	// BetasGiven says the params set betas. Python keeps the config's
	// list; the optimizers' defaults are tuples (as checkpoints show).
	BetasGiven     bool
	Eps            float64
	WeightDecay    float64
	BiasCorrection bool
	AdamWMode      bool // decoupled weight decay (adam_w_mode; always for adamw)
	TorchAdam      bool
	AMSGrad        bool

	Momentum  float64 // SGD
	Dampening float64
	Nesterov  bool

	MaxCoeff float64 // Lamb
	MinCoeff float64

	LRDecay               float64 // Adagrad
	InitialAccumulatorVal float64

	OneBit OneBit // OneBitAdam, ZeroOneAdam, OneBitLamb

	LegacyFusion bool
	Params       map[string]any // every param as written (after HF filling), for optimizers dszero does not type
	// IntParams are the params the optimizer holds as Python ints, which
	// its checkpoints write as ints: those written as JSON integers
	// ("weight_decay": 0; json.load makes an int) and, where not written,
	// those whose default in Impl's signature is the int 0
	// (torch.optim.Adam's weight_decay=0). Everything else is a float.
	IntParams map[string]bool
}

// Scheduler is the scheduler block with typed params. Fields not used by
// Type keep their zero value.
type Scheduler struct {
	Type string // "" when absent

	WarmupMinLR    float64
	WarmupMaxLR    float64 // NaN-free; see WarmupMaxLRSet
	WarmupMaxLRSet bool    // false: WarmupLR uses the optimizer's lr
	WarmupNumSteps int64
	WarmupType     string // "log" or "linear"
	TotalNumSteps  int64

	WarmupMinRatio float64 // WarmupCosineLR
	CosMinRatio    float64

	CycleMinLR            float64 // OneCycle
	CycleMaxLR            float64
	DecayLRRate           float64
	CycleFirstStepSize    float64
	CycleSecondStepSize   float64 // defaults to CycleFirstStepSize
	CycleFirstStairCount  int64
	CycleSecondStairCount int64 // defaults to CycleFirstStairCount
	DecayStepSize         int64
	CycleMomentum         bool
	CycleMinMom           float64
	CycleMaxMom           float64
	DecayMomRate          float64

	LRRangeTestMinLR     float64 // LRRangeTest
	LRRangeTestStepSize  int64
	LRRangeTestStepRate  float64
	LRRangeTestStaircase bool

	Params map[string]any // as written
}

// ActivationCheckpointing is the activation_checkpointing block.
type ActivationCheckpointing struct {
	Present                       bool
	PartitionActivations          bool
	NumberCheckpoints             int64 // 0: null
	ContiguousMemoryOptimization  bool
	SynchronizeCheckpointBoundary bool
	Profile                       bool
	CPUCheckpointing              bool
}

// AIO is the aio block used by NVMe offload.
type AIO struct {
	BlockSize          int64
	QueueDepth         int64
	IntraOpParallelism int64
	SingleSubmit       bool
	OverlapEvents      bool
	UseGDS             bool
}

// Checkpoint is the checkpoint block.
type Checkpoint struct {
	TagValidation       string // "WARN", "IGNORE" or "FAIL"
	LoadUniversal       bool
	UseNodeLocalStorage bool
}

// DataTypes is the data_types block.
type DataTypes struct {
	GradAccumDType string // "" (the model's dtype), "fp32", "fp16", "bf16"
}

// Monitors is the set of enabled monitors.
type Monitors struct {
	TensorBoard    bool
	TensorBoardDir string
	CSV            bool
	CSVDir         string
	CSVJobName     string
	WandB          bool
	Comet          bool
	JobName        string // tensorboard.job_name
}
