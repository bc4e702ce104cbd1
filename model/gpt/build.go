package gpt

import (
	"errors"

	"github.com/dszero/dszero/model"
)

var _ model.Builder = Config{}
var _ model.Model = (*Model)(nil)
var _ model.SeqParalleler = Config{}

// Build makes one rank's GPT of c (a model.Builder).
func (c Config) Build(o model.BuildOptions) (model.Model, error) {
	return New(c, Options{Gemm: o.Gemm, Acct: o.Acct, Hooks: o.Hooks, Checkpoint: o.Checkpoint,
		CPUCheckpoint: o.CPUCheckpoint, DType: o.DType, Workers: o.Workers, SeqParallel: o.SeqParallel, Fast: o.FastMath})
}

// MaxSeq is the context length (defaults applied).
func (c Config) MaxSeq() int { return c.WithDefaults().Context }

// errNoPacking is Forward's answer to position ids.
var errNoPacking = errors.New("gpt: packed samples (position ids) are not supported by GPT-2's learned positions here: train without packing")
