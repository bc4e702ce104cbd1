package mlp

import (
	"fmt"

	"github.com/dszero/dszero/model"
)

var _ model.FlopCounter = Config{}

// FlopModules lists the modules of this MLP's PyTorch twin, the
// reference harness's TinyMLP generalised, with what DeepSpeed's FLOPS
// profiler counts in each for a micro-batch of B = s.Batch rows (s.Seq
// is ignored):
//
//	TinyMLP        F.relu after each layer but the last: B·Sizes[i] FLOPs each
//	  fc1 Linear(Sizes[0], Sizes[1])     B·Sizes[0]·Sizes[1] MACs, FLOPs twice that
//	  fc2 Linear(Sizes[1], Sizes[2])     ...
//
// TinyMLP calls F.relu in its own forward, so the ReLUs count in the
// root, not in the Linears (nor does DeepSpeed count the MSE loss). Each
// fc{i} maps onto unit i-1; dszero runs the ReLU that follows a layer
// inside that layer's unit, so the unit's time includes it. c must be
// valid.
func (c Config) FlopModules(s model.FlopShape) []model.FlopModule {
	B := s.Batch
	root := model.Container("", "TinyMLP")
	for i := 1; i < len(c.Sizes)-1; i++ {
		root.FLOPs += int64(B) * int64(c.Sizes[i])
	}
	var t model.FlopTree
	t.Enter(root)
	for i := range c.Layers() {
		name := fmt.Sprintf("fc%d", i+1)
		fc := model.Linear(name, name, B, c.Sizes[i], c.Sizes[i+1], true)
		fc.Unit = i
		t.Add(fc)
	}
	t.Leave()
	return t.Modules()
}
