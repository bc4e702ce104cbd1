package stage3_test

import (
	"fmt"
	"strings"
	"sync"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/train"
	"github.com/dszero/dszero/zero"
)

// hookLog prints the unit hooks the model calls, then passes them on.
type hookLog struct {
	model.UnitHooks
	l    *model.Layout
	emit func(string)
}

func (h hookLog) BeforeForward(u int) error {
	h.emit("BeforeForward(" + h.l.Units[u].Name + ")")
	return h.UnitHooks.BeforeForward(u)
}

func (h hookLog) AfterForward(u int) error {
	h.emit("AfterForward(" + h.l.Units[u].Name + ")")
	return h.UnitHooks.AfterForward(u)
}

func (h hookLog) BeforeBackward(u int) error {
	h.emit("BeforeBackward(" + h.l.Units[u].Name + ")")
	return h.UnitHooks.BeforeBackward(u)
}

func (h hookLog) AfterBackward(u int) error {
	h.emit("AfterBackward(" + h.l.Units[u].Name + ")")
	return h.UnitHooks.AfterBackward(u)
}

// One ZeRO-3 step as rank 0 of two runs it, on the three-layer MLP (units
// fc1, fc2, fc3) with the optimizer state in NVMe swap files: the model's
// unit hooks, and inside them every all-gather (on demand, or prefetched
// along the trace the first step recorded), the waits for them, the
// releases, the reduce-scatter of each unit's gradients as its backward
// ends, and the optimizer step sub-group by sub-group, each swapped in,
// stepped and swapped out while the next is read ahead. The second step
// is shown: the first one records the trace that prefetch follows.
//
// Read it beside the code it prints: stage3/hooks.go (the four hooks),
// fetch.go (need, issue, land, prefetch, done, release), reduce.go
// (before, after, issue), stage3.go (step) and offload/optimswap.go
// (SwappedOptim.Step).
func Example_step() {
	log, err := traceStep(`{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3}},
  "zero_optimization": {"stage": 3, "sub_group_size": 1500, "stage3_param_persistence_threshold": 0,
    "stage3_prefetch_bucket_size": 1200, "stage3_max_reuse_distance": 0,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/"}}
}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(log, "\n"))
	// Output:
	// BeforeForward(fc1)
	// all-gather fc1 (1088 elements)
	// wait for the all-gather of fc1
	// prefetch: all-gather fc2 (4160 elements)
	// AfterForward(fc1)
	// release fc1
	// BeforeForward(fc2)
	// wait for the all-gather of fc2
	// prefetch: all-gather fc3 (520 elements)
	// prefetch: all-gather fc1 (1088 elements)
	// AfterForward(fc2)
	// release fc2
	// BeforeForward(fc3)
	// wait for the all-gather of fc3
	// prefetch: all-gather fc2 (4160 elements)
	// AfterForward(fc3)
	// BeforeBackward(fc3)
	// AfterBackward(fc3)
	// release fc3
	// reduce-scatter the gradients of fc3 (520 elements)
	// BeforeBackward(fc2)
	// wait for the all-gather of fc2
	// AfterBackward(fc2)
	// release fc2
	// reduce-scatter the gradients of fc2 (4160 elements)
	// BeforeBackward(fc1)
	// wait for the all-gather of fc1
	// AfterBackward(fc1)
	// release fc1
	// reduce-scatter the gradients of fc1 (1088 elements)
	// step sub-group 0 (2592 elements)
	//   swap in sub-group 0's fp32 master and optimizer state
	//   read ahead sub-group 1
	//   torch.optim.AdamW step of sub-group 0
	//   swap out sub-group 0
	// step sub-group 1 (292 elements)
	//   swap in sub-group 1's fp32 master and optimizer state
	//   torch.optim.AdamW step of sub-group 1
	//   swap out sub-group 1
}

// The same step with the parameters in NVMe swap files too
// (offload_param nvme, ZeRO-Infinity): each all-gather reads its unit's
// partitions into its input, from the reads started ahead of it along the
// trace (stage3/readahead.go) where a swap buffer was free — buffer_count
// 4 lets three be held at once — and from the file itself otherwise
// (offload/paramswap.go SwappedParams.Read); each sub-group writes its updated
// parameter partitions back after its optimizer step, and the step ends by
// reading ahead for the next forward: the reads the first lines take
// were started at the end of the first step, as the last three lines
// start them for a step after this one.
func Example_stepParamNVMe() {
	log, err := traceStep(`{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3}},
  "zero_optimization": {"stage": 3, "sub_group_size": 1500, "stage3_param_persistence_threshold": 0,
    "stage3_prefetch_bucket_size": 1200, "stage3_max_reuse_distance": 0,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/"},
    "offload_param": {"device": "nvme", "nvme_path": "/", "buffer_count": 4, "buffer_size": 4096}}
}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(log, "\n"))
	// Output:
	// BeforeForward(fc1)
	// all-gather fc1 (1088 elements)
	//   take the partition of fc1.weight from its read ahead
	//   take the partition of fc1.bias from its read ahead
	// wait for the all-gather of fc1
	// prefetch: all-gather fc2 (4160 elements)
	//   take the partition of fc2.weight from its read ahead
	//   swap in the partition of fc2.bias
	// read ahead the partition of fc3.weight
	// read ahead the partition of fc3.bias
	// AfterForward(fc1)
	// release fc1
	// BeforeForward(fc2)
	// wait for the all-gather of fc2
	// prefetch: all-gather fc3 (520 elements)
	//   take the partition of fc3.weight from its read ahead
	//   take the partition of fc3.bias from its read ahead
	// prefetch: all-gather fc1 (1088 elements)
	//   swap in the partition of fc1.weight
	//   swap in the partition of fc1.bias
	// AfterForward(fc2)
	// release fc2
	// BeforeForward(fc3)
	// wait for the all-gather of fc3
	// prefetch: all-gather fc2 (4160 elements)
	//   swap in the partition of fc2.weight
	//   swap in the partition of fc2.bias
	// AfterForward(fc3)
	// BeforeBackward(fc3)
	// AfterBackward(fc3)
	// release fc3
	// reduce-scatter the gradients of fc3 (520 elements)
	// BeforeBackward(fc2)
	// wait for the all-gather of fc2
	// AfterBackward(fc2)
	// release fc2
	// reduce-scatter the gradients of fc2 (4160 elements)
	// BeforeBackward(fc1)
	// wait for the all-gather of fc1
	// AfterBackward(fc1)
	// release fc1
	// reduce-scatter the gradients of fc1 (1088 elements)
	// step sub-group 0 (2592 elements)
	//   swap in sub-group 0's fp32 master and optimizer state
	//   read ahead sub-group 1
	//   torch.optim.AdamW step of sub-group 0
	//   swap out sub-group 0
	//   swap out sub-group 0's parameter partitions
	// step sub-group 1 (292 elements)
	//   swap in sub-group 1's fp32 master and optimizer state
	//   torch.optim.AdamW step of sub-group 1
	//   swap out sub-group 1
	//   swap out sub-group 1's parameter partitions
	// read ahead the partition of fc1.weight
	// read ahead the partition of fc1.bias
	// read ahead the partition of fc2.weight
}

// traceStep trains two steps of the three-layer MLP on two in-process
// ranks with the optimizer's (and, as the config says, the parameters')
// swap files in memory, and returns what rank 0's unit hooks and
// stage3.Config.Trace heard during the second step, in order.
func traceStep(config string) ([]string, error) {
	d, err := ztest.LoadMLP(mlpRef)
	if err != nil {
		return nil, err
	}
	plan, err := ztest.Plan(config, 2)
	if err != nil {
		return nil, err
	}
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		log  []string
		step = 1
	)
	emit := func(ev string) {
		mu.Lock()
		defer mu.Unlock()
		if step == 2 {
			log = append(log, ev)
		}
	}
	devs := []train.Device{{Acct: mem.NewAccountant(0), Gemm: gemm}, {Acct: mem.NewAccountant(1), Gemm: gemm}}
	cfg := train.Config{Plan: plan, Model: d.Cfg, Init: d.Init, Batches: mlpSamples{d}, Steps: 2, Devices: devs, Workers: 1,
		EngineOptions: func(rank int, o *zero.Options) error {
			o.SwapFS = nvme.NewMemFS(0)
			if rank == 0 {
				o.Trace = emit
			}
			return nil
		},
		Hooks: func(rank int, eng *zero.Engine) model.UnitHooks {
			if rank != 0 {
				return eng.Strategy()
			}
			return hookLog{UnitHooks: eng.Strategy(), l: &d.Layout, emit: emit}
		}}
	if _, err := train.Run(cfg, func(r train.Record) error {
		mu.Lock()
		step = int(r.Step) + 1
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	return log, nil
}

// mlpSamples serves the harness's samples in order, B per rank.
type mlpSamples struct{ d ztest.MLPData }

func (m mlpSamples) Batch(step, micro, rank int, b *model.Batch) error {
	if len(b.X) != b.B*16 {
		b.X, b.Y = make([]float32, b.B*16), make([]float32, b.B*8)
	}
	for i := 0; i < b.B; i++ {
		n := (step*2*b.B + rank*b.B + i) % ztest.MLPSamples
		copy(b.X[i*16:(i+1)*16], m.d.X[n*16:])
		copy(b.Y[i*8:(i+1)*8], m.d.Y[n*8:])
	}
	return nil
}
