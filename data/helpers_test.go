package data

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/tokenizer"
)

// The real tokenizers live in the tokenizer package's testdata.
var tokTestdata = filepath.Join("..", "tokenizer", "testdata")

var tokCache sync.Map

func loadTok(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	if tk, ok := tokCache.Load(name); ok {
		return tk.(*tokenizer.Tokenizer)
	}
	raw, err := os.ReadFile(filepath.Join(tokTestdata, name, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tokJSON, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(tokTestdata, name, "tokenizer_config.json")
	cfgJSON, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromJSON(tokJSON, cfgJSON, name+"/tokenizer.json", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tokCache.Store(name, tk)
	return tk
}

// goldenChat is one render of tokenizer/testdata/golden/chat.json: a
// conversation rendered by @huggingface/jinja and tokenized by
// @huggingface/tokenizers.
type goldenChat struct {
	Tokenizer    string `json:"tokenizer"`
	Conversation int    `json:"conversation"`
	GenPrompt    bool   `json:"add_generation_prompt"`
	Rendered     string `json:"rendered"`
	IDs          []int32
	RawIDs       []int `json:"ids"`
}

func golden(t *testing.T, tok string, conv int) goldenChat {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(tokTestdata, "golden", "chat.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenChat `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	for _, c := range g.Cases {
		if c.Tokenizer == tok && c.Conversation == conv && !c.GenPrompt {
			for _, id := range c.RawIDs {
				c.IDs = append(c.IDs, int32(id))
			}
			return c
		}
	}
	t.Fatalf("no golden render of %s conversation %d", tok, conv)
	return goldenChat{}
}

// labelsFor returns ids with IgnoreIndex outside the [lo, hi) spans.
func labelsFor(ids []int32, spans ...[2]int) []int32 {
	out := make([]int32, len(ids))
	for k := range out {
		out[k] = model.IgnoreIndex
	}
	for _, s := range spans {
		copy(out[s[0]:s[1]], ids[s[0]:s[1]])
	}
	return out
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
