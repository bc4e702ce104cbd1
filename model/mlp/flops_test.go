package mlp

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

// TestFlopModulesTinyByHand: the harness's TinyMLP (16 → 64 → 64 → 8) on
// 8 rows. fc1 8·16·64 = 8,192 MACs, fc2 8·64·64 = 32,768, fc3 8·64·8 =
// 4,096, each Linear's FLOPs twice its MACs; the two ReLUs run in
// TinyMLP's own forward, 8·64 FLOPs each. Each fc maps onto its unit.
func TestFlopModulesTinyByHand(t *testing.T) {
	cfg, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.FlopModules(model.FlopShape{Batch: 8, Seq: 1})
	fc := func(name string, in, out int, macs int64, unit int) model.FlopModule {
		return model.FlopModule{Depth: 1, Name: name, Class: "Linear", Params: []string{name + ".weight", name + ".bias"},
			Extra: "in_features=" + strconv.Itoa(in) + ", out_features=" + strconv.Itoa(out) + ", bias=True", MACs: macs, FLOPs: 2 * macs, Unit: unit}
	}
	want := []model.FlopModule{
		{Depth: 0, Class: "TinyMLP", FLOPs: 2 * 8 * 64, Unit: model.NoUnit},
		fc("fc1", 16, 64, 8_192, 0),
		fc("fc2", 64, 64, 32_768, 1),
		fc("fc3", 64, 8, 4_096, 2),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("modules (-hand +FlopModules):\n%s", d)
	}
}
