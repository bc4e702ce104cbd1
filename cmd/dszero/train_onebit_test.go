package main

import (
	"strings"
	"testing"
)

// TestTrainOneBitRealConfigs: real ds_configs naming DeepSpeed's 1-bit
// optimizers train (BingBertSquad's OnebitAdam, fp16), and one that
// DeepSpeed refuses (0/1 Adam with ZeRO stage 3) is refused with
// DeepSpeed's own rule and its JSON position.
func TestTrainOneBitRealConfigs(t *testing.T) {
	const dir = "../../dsconfig/testdata/ds_configs/"
	code, out, errs := runCLI("train", "--deepspeed", dir+"deepspeedai__DeepSpeedExamples__training__BingBertSquad__1-bit_adam__nccl__deepspeed_onebitadam_bsz96_config.json",
		"--nproc", "2", "--steps", "2", "--model", "tiny", "--data", "random", "--seq", "16")
	if code != 0 || !strings.Contains(out, "done: 2 steps") {
		t.Errorf("OnebitAdam: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI("train", "--deepspeed", dir+"OpenGVLab__InternVL__segmentation__zero_configs__adam_zero3_fp16.json",
		"--nproc", "2", "--steps", "2", "--model", "tiny", "--data", "random", "--seq", "16")
	if code == 0 || !strings.Contains(errs, ":5:13: optimizer.type: error: 0/1 Adam is not compatible with ZeRO (stage 3)") {
		t.Errorf("ZeroOneAdam at stage 3: exit %d\n%s%s", code, out, errs)
	}
}
