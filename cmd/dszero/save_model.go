package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/model/gpt"
)

// Writing --save-model (and FULL_STATE_DICT's consolidated weights) by
// streaming. When the run saves checkpoints, the final weights are
// written from the last one — the checkpoint of the last step, which
// every rank has just saved — as dszero export does (checkpoint.Export:
// one parameter at a time, each read piece by piece from the ranks'
// files), instead of gathering the whole fp32 model into every rank's
// memory. Without --save the run gathers the weights (Config.ReturnParams)
// and writes them from memory.

// streamsSaveModel says whether --save-model is written from the
// checkpoints in saveDir.
func streamsSaveModel(saveModel, saveDir string) bool { return saveModel != "" && saveDir != "" }

// writeSaveModel writes the Hugging Face GPT-2 directory out for model
// cfg (--model arg) from ckptDir's latest checkpoint: model.safetensors
// under Hugging Face's names, and config.json as gpt.SaveDir writes it.
func writeSaveModel(out, ckptDir string, cfg gpt.Config, arg string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	opts := checkpoint.ExportOptions{DType: "F32", Rename: func(names []string, shapes [][]int) ([]string, []bool, error) {
		return gpt2HFNames(cfg, arg, names, shapes)
	}}
	if _, err := checkpoint.Export(ckptDir, filepath.Join(out, "model.safetensors"), opts); err != nil {
		return fmt.Errorf("from the checkpoint in %s: %w", ckptDir, err)
	}
	return gpt.WriteConfig(filepath.Join(out, "config.json"), cfg)
}
