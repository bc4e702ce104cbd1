package llama

import "github.com/dszero/dszero/model"

var (
	_ model.Builder       = Config{}
	_ model.Initializer   = Config{}
	_ model.Model         = (*Model)(nil)
	_ model.SeqParalleler = Config{}
)

// Build makes one rank's decoder of c (a model.Builder).
func (c Config) Build(o model.BuildOptions) (model.Model, error) {
	return New(c, Options{Gemm: o.Gemm, Acct: o.Acct, Hooks: o.Hooks, Checkpoint: o.Checkpoint,
		CPUCheckpoint: o.CPUCheckpoint, Round: o.DType.Rounding(), Workers: o.Workers, SeqParallel: o.SeqParallel})
}

// MaxSeq is max_position_embeddings (defaults applied).
func (c Config) MaxSeq() int { return c.WithDefaults().MaxPositions }
