package fsdpconfig

import (
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/dsconfig"
)

// TestToDSConfigCompiles reads the ds_config of every accepted corpus file
// with dszero's own dsconfig (HF mode fills the "auto" batch values) and
// checks that it means the same stage, precision, offload and groups.
func TestToDSConfigCompiles(t *testing.T) {
	for _, c := range corpusCases() {
		p, diags := Load(filepath.Join("testdata", "corpus", c.file), Options{})
		if diags.HasErrors() {
			continue
		}
		hf := dsconfig.DefaultHFArgs()
		hf.BF16, hf.FP16 = p.MixedPrecision == "bf16", p.MixedPrecision == "fp16"
		js := ToDSConfig(p)
		dp, dd := dsconfig.Compile(c.file+".ds_config.json", js, dsconfig.Options{WorldSize: p.NumProcesses, HF: &hf})
		if dd.HasErrors() {
			t.Errorf("%s: dsconfig refuses the rendered ds_config:\n%s\n%v", c.file, js, dd.Filter(dsconfig.Error))
			continue
		}
		z := dp.Zero
		if z.Stage != p.Stage {
			t.Errorf("%s: ds_config stage %d, plan stage %d", c.file, z.Stage, p.Stage)
		}
		wantDType := map[string]string{"bf16": "bf16", "fp16": "fp16"}[p.MixedPrecision]
		if wantDType == "" {
			wantDType = "fp32"
		}
		if dp.Precision.DType.String() != wantDType {
			t.Errorf("%s: ds_config precision %s, want %s", c.file, dp.Precision.DType, wantDType)
		}
		offloaded := z.OffloadParam.Device != dsconfig.OffloadNone && z.OffloadOptimizer.Device != dsconfig.OffloadNone
		if offloaded != (p.Offload && p.Stage == 3) {
			t.Errorf("%s: ds_config offload %v, plan offload %v at stage %d", c.file, offloaded, p.Offload, p.Stage)
		}
		if p.Hybrid() != (z.MiCSShardSize > 0) || p.Hybrid() && z.MiCSShardSize != int64(p.ShardGroupSize) {
			t.Errorf("%s: mics_shard_size %d, plan groups of %d (hybrid %v)", c.file, z.MiCSShardSize, p.ShardGroupSize, p.Hybrid())
		}
		if z.Gather16BitWeightsOnModelSave != (p.Stage == 3 && p.StateDict == FullStateDict) {
			t.Errorf("%s: gather_16bit_weights_on_model_save %v for %s", c.file, z.Gather16BitWeightsOnModelSave, p.StateDict)
		}
		if dp.ActivationCheckpointing.Present != p.ActivationCkpt {
			t.Errorf("%s: activation_checkpointing block %v, plan %v", c.file, dp.ActivationCheckpointing.Present, p.ActivationCkpt)
		}
	}
}
