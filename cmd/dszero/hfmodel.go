package main

import (
	"os"
	"path/filepath"

	"github.com/dszero/dszero/model/gpt"
)

// fillHiddenSize gives HF mode's "auto" bucket sizes the hidden size of
// the model the run trains, as the Trainer reads model.config.hidden_size:
// --model's preset or its directory's config.json. An explicit
// --hidden_size wins; a model that cannot be read leaves it unset (the
// model step reports why).
func (h *hfOptions) fillHiddenSize(modelArg string) {
	if h.a.HiddenSize > 0 || modelArg == "" {
		return
	}
	if st, err := os.Stat(modelArg); err == nil && st.IsDir() {
		if c, err := gpt.ReadConfig(filepath.Join(modelArg, "config.json")); err == nil {
			h.a.HiddenSize = int64(c.Dim)
		}
		return
	}
	if c, err := gpt.Preset(modelArg); err == nil {
		h.a.HiddenSize = int64(c.Dim)
	}
}
