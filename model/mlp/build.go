package mlp

import "github.com/dszero/dszero/model"

var _ model.Builder = Config{}
var _ model.Model = (*Model)(nil)

// Build makes one rank's MLP of c (a model.Builder). The MLP has no
// activation checkpointing: each layer's output is all it keeps.
func (c Config) Build(o model.BuildOptions) (model.Model, error) {
	return New(c, Options{Gemm: o.Gemm, Acct: o.Acct, Hooks: o.Hooks, Round: o.DType.Rounding()})
}

// MaxSeq is 0: the MLP takes dense vectors, not sequences.
func (c Config) MaxSeq() int { return 0 }
