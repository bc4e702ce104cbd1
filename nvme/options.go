package nvme

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
)

// Options configure a Swapper: DeepSpeed's aio block and the NVMe knobs of
// offload_optimizer / offload_param, in plain fields. OptimizerOptions and
// ParamOptions fill them from a plan.
type Options struct {
	// Path is nvme_path: an existing directory on the swap disk. The
	// swapper keeps its files in Path/dszero_rank<Rank>/<Name>.
	Path string
	Rank int
	// Name separates swappers that share Path and rank ("optimizer",
	// "params"); "" puts the files in the rank folder itself.
	Name string
	// Source is the config block the options came from
	// ("zero_optimization.offload_optimizer"); errors name its keys.
	Source string

	// BufferCount is buffer_count: how many swap buffers the pool has.
	BufferCount int
	// BufferBytes is the size of one swap buffer, rounded up to Align.
	// DeepSpeed sizes optimizer buffers to the largest sub-group and
	// parameter buffers to offload_param.buffer_size elements.
	BufferBytes int64

	// BlockSize is aio.block_size: the bytes of one I/O. A multiple of Align.
	BlockSize int64
	// QueueDepth is aio.queue_depth: the I/Os each worker keeps in flight.
	QueueDepth int
	// IntraOpParallelism is aio.intra_op_parallelism (formerly
	// thread_count): how many workers serve each request.
	IntraOpParallelism int
	// SingleSubmit and OverlapEvents are aio.single_submit and
	// aio.overlap_events: how DeepSpeed's libaio handle submits and reaps
	// I/O. Blocking goroutines have no submit or reap step, so they change
	// nothing here; they are kept so that a plan maps one to one.
	SingleSubmit  bool
	OverlapEvents bool
	// UseGDS is aio.use_gds (GPUDirect Storage); New refuses it.
	UseGDS bool

	// Preflight is how many bytes New writes under Path before it
	// returns (the bytes the run will keep there), so that a missing,
	// unwritable or too small nvme_path fails at once. 0 skips it.
	Preflight int64

	// Category is what the files and buffers hold, for the accountant:
	// mem.OptimState for optimizer state, mem.Params16 for parameters.
	Category mem.Category

	// noChecksum turns off the blocks' CRC-32C (checksum.go): the
	// baseline of BenchmarkChecksum. Nothing else sets it.
	noChecksum bool
}

// DefaultOptions are DeepSpeed 0.19.5's defaults for the aio block and
// offload_optimizer.buffer_count, with path and buffer size left to fill.
func DefaultOptions() Options {
	return Options{
		BufferCount:        4,
		BlockSize:          1 << 20,
		QueueDepth:         8,
		IntraOpParallelism: 1,
		OverlapEvents:      true,
		Category:           mem.OptimState,
	}
}

// key names a config key of o's block for messages.
func (o Options) key(name string) string {
	if o.Source == "" {
		return name
	}
	return o.Source + "." + name
}

// Validate reports every problem with the options, each naming its key and
// value.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("nvme: "+format, args...)) }
	if o.Path == "" {
		bad("%s is empty; set it to a directory on a fast local disk", o.key("nvme_path"))
	}
	if o.Rank < 0 {
		bad("rank %d is negative", o.Rank)
	}
	if o.Name != "" && !validKey(o.Name) {
		bad("swapper name %q is not a plain file name", o.Name)
	}
	if o.BufferCount < 1 {
		bad("%s %d must be at least 1", o.key("buffer_count"), o.BufferCount)
	}
	if o.BufferBytes < 1 {
		bad("buffer size %d bytes must be at least 1", o.BufferBytes)
	}
	if o.BlockSize < Align || o.BlockSize%Align != 0 {
		bad("aio.block_size %d must be a positive multiple of %d (the O_DIRECT alignment); DeepSpeed's default is 1048576", o.BlockSize, Align)
	}
	if o.QueueDepth < 1 {
		bad("aio.queue_depth %d must be at least 1", o.QueueDepth)
	}
	if o.IntraOpParallelism < 1 {
		bad("aio.intra_op_parallelism %d must be at least 1", o.IntraOpParallelism)
	}
	if o.UseGDS {
		bad("aio.use_gds: GPUDirect Storage is not supported by dszero; set it to false")
	}
	if o.Preflight < 0 {
		bad("preflight size %d is negative", o.Preflight)
	}
	if o.Category < 0 || o.Category >= mem.Category(len(mem.Categories())) {
		bad("category %v is not a mem.Category", o.Category)
	}
	return errors.Join(errs...)
}

// bufferBytes is BufferBytes rounded up to Align.
func (o Options) bufferBytes() int64 { return roundUp(o.BufferBytes) }

func roundUp(n int64) int64 { return (n + Align - 1) / Align * Align }

// fromAIO copies the plan's aio block.
func fromAIO(a dsconfig.AIO) Options {
	o := DefaultOptions()
	o.BlockSize = a.BlockSize
	o.QueueDepth = int(a.QueueDepth)
	o.IntraOpParallelism = int(a.IntraOpParallelism)
	o.SingleSubmit = a.SingleSubmit
	o.OverlapEvents = a.OverlapEvents
	o.UseGDS = a.UseGDS
	return o
}

// OptimizerOptions are the options of rank's optimizer-state swapper
// (zero_optimization.offload_optimizer with device nvme): buffer_count
// buffers of largestBytes each — DeepSpeed sizes them to the largest
// sub-group's tensor — and a preflight of preflight bytes.
func OptimizerOptions(p dsconfig.Plan, rank int, largestBytes, preflight int64) (Options, error) {
	oo := p.Zero.OffloadOptimizer
	if oo.Device != dsconfig.OffloadNVMe {
		return Options{}, fmt.Errorf("nvme: zero_optimization.offload_optimizer.device is %q, not nvme", oo.Device)
	}
	o := fromAIO(p.AIO)
	o.Path, o.Rank, o.Name = oo.NVMePath, rank, "optimizer"
	o.Source = "zero_optimization.offload_optimizer"
	o.BufferCount = int(oo.BufferCount)
	o.BufferBytes = largestBytes
	o.Preflight = preflight
	o.Category = mem.OptimState
	return o, nil
}

// ParamOptions are the options of rank's parameter swapper
// (zero_optimization.offload_param with device nvme): buffer_count buffers
// of buffer_size elements of elemBytes bytes each, and a preflight of
// preflight bytes.
func ParamOptions(p dsconfig.Plan, rank, elemBytes int, preflight int64) (Options, error) {
	op := p.Zero.OffloadParam
	if op.Device != dsconfig.OffloadNVMe {
		return Options{}, fmt.Errorf("nvme: zero_optimization.offload_param.device is %q, not nvme", op.Device)
	}
	o := fromAIO(p.AIO)
	o.Path, o.Rank, o.Name = op.NVMePath, rank, "params"
	o.Source = "zero_optimization.offload_param"
	o.BufferCount = int(op.BufferCount)
	o.BufferBytes = op.BufferSize * int64(elemBytes)
	o.Preflight = preflight
	o.Category = mem.Params16
	return o, nil
}
