package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/llama"
)

// trainModel is --model as dszero train drives it, one implementation a
// model family: gptJob (train_gpt.go) and llamaJob (train_llama.go).
// loadModel picks the family from the argument; the other steps ask the
// trainModel, never which family it is.
type trainModel interface {
	// Builder builds each rank's model (train.Config.Model).
	Builder() model.Builder
	// Shape is the model's vocabulary and context (its longest sequence).
	Shape() (vocab, context int)
	// NumParams is the model's parameter count.
	NumParams() int
	// InitRange reads the initial weights by range from the --model
	// directory, each rank only what it holds; nil draws them from --seed.
	InitRange() func(dst []float32, lo int) error
	// RecordsTokenizer is where fine-tuning records' tokenizer is read
	// from without --tokenizer: the model's directory, "" for a preset
	// (which has none). It is an error for a family that does not train
	// on records.
	RecordsTokenizer() (dir string, err error)
	// SaveModel writes the final weights as a Hugging Face directory
	// transformers loads, and says what it wrote.
	SaveModel(dir string, final []float32) (what string, err error)
}

// checkpointSaver is a trainModel that writes --save-model from the run's
// last checkpoint, streamed, when the run saves checkpoints
// (save_model.go), instead of from weights gathered in memory.
type checkpointSaver interface {
	// SaveModelFrom writes dir from ckptDir's latest checkpoint and says
	// what it wrote.
	SaveModelFrom(dir, ckptDir string) (what string, err error)
}

// loadModel is --model: a preset, or a Hugging Face directory (GPT-2 or
// the Llama family) whose weights every rank reads only what it holds of.
func (j *trainJob) loadModel() error {
	if ok, err := j.loadLlama(); ok {
		return err
	}
	err := j.loadGPT()
	if st, serr := os.Stat(j.f.modelArg); err != nil && (serr != nil || !st.IsDir()) {
		return fmt.Errorf("%w; the Llama family's presets: %s", err, strings.Join(llama.PresetNames(), ", "))
	}
	return err
}
