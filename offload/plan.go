package offload

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
)

// NewSwapper makes a swapper given the largest tensor's and all the swap
// files' bytes (the store that calls it closes it).
type NewSwapper func(largestBytes, totalBytes int64) (*nvme.Swapper, error)

// Swappers are the swappers the plan's NVMe offload asks for on rank,
// their files on fsys (nil: the operating system's, with O_DIRECT) and
// accounted by acct: optimizer with offload_optimizer nvme (buffers of
// the largest sub-group, SwappedOptim), params with offload_param nvme
// (buffers of the largest partition, SwappedParams, which
// offload_param.buffer_size must hold); nil for a tier not on NVMe.
func Swappers(plan dsconfig.Plan, rank int, fsys nvme.FS, acct *mem.Accountant) (optimizer, params NewSwapper) {
	open := func(opts nvme.Options) (*nvme.Swapper, error) {
		fs := fsys
		if fs == nil {
			fs = nvme.NewOSFS()
		}
		return nvme.New(fs, acct, opts)
	}
	if plan.Zero.OffloadOptimizer.Device == dsconfig.OffloadNVMe {
		optimizer = func(largest, total int64) (*nvme.Swapper, error) {
			opts, err := nvme.OptimizerOptions(plan, rank, largest, total)
			if err != nil {
				return nil, err
			}
			return open(opts)
		}
	}
	if plan.Zero.OffloadParam.Device == dsconfig.OffloadNVMe {
		params = func(largest, total int64) (*nvme.Swapper, error) {
			opts, err := nvme.ParamOptions(plan, rank, 4, total)
			if err != nil {
				return nil, err
			}
			if largest > opts.BufferBytes {
				return nil, fmt.Errorf("zero_optimization.offload_param.buffer_size %d elements is smaller than this rank's largest parameter partition (%d elements): raise buffer_size", plan.Zero.OffloadParam.BufferSize, largest/4)
			}
			opts.BufferBytes = largest // buffers of the largest partition suffice (DeepSpeed allocates buffer_size)
			return open(opts)
		}
	}
	return optimizer, params
}
