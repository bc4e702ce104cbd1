package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/llama"
)

var (
	_ trainModel      = (*gptJob)(nil)
	_ checkpointSaver = (*gptJob)(nil)
)

// gptJob is what dszero train holds for a GPT (package model/gpt): its
// configuration and, from a Hugging Face directory, the open weights.
type gptJob struct {
	cfg     gpt.Config
	arg     string       // --model
	weights *gpt.Weights // --model DIR's; nil for a preset
}

// loadGPT is --model for a GPT: a preset, or a Hugging Face GPT-2
// directory whose weights every rank reads only what it holds of.
func (j *trainJob) loadGPT() error {
	arg := j.f.modelArg
	g := &gptJob{arg: arg}
	st, err := os.Stat(arg)
	if err != nil || !st.IsDir() {
		if g.cfg, err = gpt.Preset(arg); err != nil {
			return fmt.Errorf("--model: %w (or give a directory with config.json and model.safetensors)", err)
		}
		j.m = g
		return nil
	}
	if g.cfg, err = gpt.ReadConfig(filepath.Join(arg, "config.json")); err == nil {
		g.weights, err = gpt.OpenWeights(filepath.Join(arg, "model.safetensors"), g.cfg)
	}
	if err != nil {
		return fmt.Errorf("--model %s: %w", arg, err)
	}
	j.closers = append(j.closers, func() { g.weights.Close() })
	j.m = g
	return nil
}

func (g *gptJob) Builder() model.Builder      { return g.cfg }
func (g *gptJob) Shape() (vocab, context int) { return g.cfg.Vocab, g.cfg.Context }
func (g *gptJob) NumParams() int              { return g.cfg.NumParams() }

func (g *gptJob) InitRange() func([]float32, int) error {
	if g.weights == nil {
		return nil
	}
	return g.weights.ReadRange
}

func (g *gptJob) RecordsTokenizer() (string, error) {
	return "", fmt.Errorf("fine-tuning records (JSON, JSON Lines, Parquet) train a Llama-family model (--model %s or a directory with model_type %s); a GPT trains on text or a nanoGPT .bin",
		strings.Join(llama.PresetNames(), ", "), strings.Join(llamaModelTypes, ", "))
}

// SaveModel writes GPT-2's Hugging Face directory from final.
func (g *gptJob) SaveModel(dir string, final []float32) (string, error) {
	return "model.safetensors + config.json", gpt.SaveDir(dir, g.cfg, final)
}

// SaveModelFrom writes GPT-2's Hugging Face directory from ckptDir's
// latest checkpoint (writeSaveModel).
func (g *gptJob) SaveModelFrom(dir, ckptDir string) (string, error) {
	return "model.safetensors + config.json", writeSaveModel(dir, ckptDir, g.cfg, g.arg)
}
