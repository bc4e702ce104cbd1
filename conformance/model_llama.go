package conformance

import (
	"path/filepath"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/llama"
)

// buildLlama builds a Llama-family model (LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM) from the
// entry's llama_config, the model's config.json; buildArch then checks
// its layout against the entry's parameters. The data is the GPT's:
// token rows of SeqLen+1, the loss the mean cross-entropy of each row's
// next tokens.
func (a *arch) buildLlama(c *Case, d ModelDesc) error {
	if len(d.LlamaConfig) == 0 {
		return unsupported("model %q: a Llama-family model needs llama_config (its config.json) in %s", c.ModelKey(), ModelsFile)
	}
	if d.Loss != "" && d.Loss != "cross_entropy" {
		return unsupported("llama: loss %q (dszero's Llama family uses cross_entropy)", d.Loss)
	}
	cfg, err := llama.ParseConfig(filepath.Join(c.InitDir, ModelsFile)+": "+c.ModelKey()+".llama_config", d.LlamaConfig)
	if err != nil {
		return unsupported("%v", err)
	}
	a.llama = cfg
	a.layout = cfg.Layout()
	return nil
}

// builder is the model each rank builds.
func (a *arch) builder() model.Builder {
	switch a.name {
	case "mlp":
		return a.mlp
	case "llama":
		return a.llama
	}
	return a.gpt
}
