package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// toyJSON builds a small tokenizer.json: a BPE over the given vocab and
// merges, with model flags and components given as JSON fragments.
func toyJSON(t *testing.T, vocab map[string]int, merges []string, model map[string]any, parts map[string]any) []byte {
	t.Helper()
	m := map[string]any{"type": "BPE", "vocab": vocab, "merges": merges}
	for k, v := range model {
		m[k] = v
	}
	doc := map[string]any{"version": "1.0", "added_tokens": []any{}, "normalizer": nil,
		"pre_tokenizer": nil, "post_processor": nil, "decoder": nil, "model": m}
	for k, v := range parts {
		doc[k] = v
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustFromJSON(t *testing.T, tok, cfg []byte) *Tokenizer {
	t.Helper()
	tk, err := FromJSON(tok, cfg, "toy/tokenizer.json", "toy/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

var abcVocab = map[string]int{"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6, "ba": 7}

func TestBPEMerges(t *testing.T) {
	tests := []struct {
		name   string
		merges []string
		model  map[string]any
		in     string
		want   []int
	}{
		// (a,b) has rank 0, so "abc" becomes ab+c, then abc.
		{"rank order", []string{"a b", "b c", "ab c"}, nil, "abc", []int{5}},
		// With (b,c) first, "abc" becomes a+bc and stops: no (a,bc) merge.
		{"other rank order", []string{"b c", "a b", "ab c"}, nil, "abc", []int{0, 4}},
		// Equal ranks (the same pair twice): the leftmost merges first, so
		// "bab" is ba+b, not b+ab.
		{"leftmost tie", []string{"b a", "a b"}, nil, "bab", []int{7, 1}},
		{"no merges", nil, nil, "cab", []int{2, 0, 1}},
		// Without unk_token an unknown character is dropped, and its
		// neighbours become adjacent and can merge.
		{"unknown dropped without unk_token", []string{"a b"}, nil, "axb", []int{3}},
		{"unk", []string{"a b"}, map[string]any{"unk_token": "<unk>"}, "axyb", []int{0, 6, 6, 1}},
		{"fuse_unk", []string{"a b"}, map[string]any{"unk_token": "<unk>", "fuse_unk": true}, "axyb", []int{0, 6, 1}},
		{"ignore_merges", []string{"b c"}, map[string]any{"ignore_merges": true}, "abc", []int{5}},
		{"merges as pairs", nil, nil, "abc", []int{5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var merges any = tc.merges
			if tc.name == "merges as pairs" {
				merges = [][]string{{"a", "b"}, {"ab", "c"}}
			}
			data := toyJSON(t, abcVocab, nil, tc.model, nil)
			var doc map[string]any
			_ = json.Unmarshal(data, &doc)
			doc["model"].(map[string]any)["merges"] = merges
			data, _ = json.Marshal(doc)
			tk := mustFromJSON(t, data, nil)
			if got := tk.Encode(tc.in, true); !cmp.Equal(got, tc.want) {
				t.Errorf("Encode(%q) (-want +got):\n%s", tc.in, cmp.Diff(tc.want, got))
			}
		})
	}
}

func TestBPEByteFallbackAndAffixes(t *testing.T) {
	vocab := map[string]int{"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "a": 3, "b": 4}
	tk := mustFromJSON(t, toyJSON(t, vocab, nil, map[string]any{"byte_fallback": true, "unk_token": "<unk>"},
		map[string]any{"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}}}), nil)
	if got, want := tk.Encode("aéb", false), []int{3, 1, 2, 4}; !cmp.Equal(got, want) {
		t.Errorf("byte fallback: got %v, want %v", got, want)
	}
	// "€" is E2 82 AC; <0xE2> is missing, so the character is unknown.
	if got, want := tk.Encode("a€", false), []int{3, 0}; !cmp.Equal(got, want) {
		t.Errorf("partial bytes: got %v, want %v", got, want)
	}
	if got, want := tk.Decode([]int{3, 1, 2, 4}), "aéb"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
	// A lone <0xC3> is invalid UTF-8: one U+FFFD per byte, as in Rust.
	if got, want := tk.Decode([]int{3, 1, 4}), "a\uFFFDb"; got != want {
		t.Errorf("Decode invalid = %q, want %q", got, want)
	}

	// continuing_subword_prefix and end_of_word_suffix join the lookups.
	vocab = map[string]int{"a": 0, "##b": 1, "##b</w>": 2, "a##b</w>": 3, "ab</w>": 4}
	tk = mustFromJSON(t, toyJSON(t, vocab, []string{"a ##b</w>"},
		map[string]any{"continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"}, nil), nil)
	// Symbols: "a", "##b</w>"; the merge yields "a" + "b</w>" = "ab</w>".
	if got, want := tk.Encode("ab", false), []int{4}; !cmp.Equal(got, want) {
		t.Errorf("affixes: got %v, want %v", got, want)
	}
}

func TestAddedTokenSingleWord(t *testing.T) {
	vocab := map[string]int{"o": 0, "k": 1, " ": 2, "b": 3}
	data := toyJSON(t, vocab, nil, nil, map[string]any{"added_tokens": []any{
		map[string]any{"id": 4, "content": "ok", "single_word": true, "special": false, "normalized": false},
	}})
	tk := mustFromJSON(t, data, nil)
	tests := []struct {
		in   string
		want []int
	}{
		{"ok", []int{4}},
		{"ok ok", []int{4, 2, 4}},
		{"bok", []int{3, 0, 1}}, // inside a word: not the added token
		{"okb", []int{0, 1, 3}},
	}
	for _, tc := range tests {
		if got := tk.Encode(tc.in, false); !cmp.Equal(got, tc.want) {
			t.Errorf("Encode(%q) (-want +got):\n%s", tc.in, cmp.Diff(tc.want, got))
		}
	}
}

// TestLlamaConfigPostProcessor: transformers' Llama tokenizer classes take
// BOS/EOS from add_bos_token/add_eos_token, not from tokenizer.json.
func TestLlamaConfigPostProcessor(t *testing.T) {
	tokJSON, cfgJSON := testdataFiles(t, "mistral")
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bos, eos bool
		want     []int
	}{
		{true, false, []int{1, 22557}},
		{true, true, []int{1, 22557, 2}},
		{false, true, []int{22557, 2}},
	} {
		cfg["add_bos_token"], cfg["add_eos_token"] = tc.bos, tc.eos
		data, _ := json.Marshal(cfg)
		tk := mustFromJSON(t, tokJSON, data)
		if got := tk.Encode("Hello", true); !cmp.Equal(got, tc.want) {
			t.Errorf("bos=%v eos=%v: got %v, want %v", tc.bos, tc.eos, got, tc.want)
		}
		if got := tk.Encode("Hello", false); !cmp.Equal(got, []int{22557}) {
			t.Errorf("bos=%v eos=%v, addSpecial=false: got %v", tc.bos, tc.eos, got)
		}
	}
}

func TestSpecialTokensAndVocab(t *testing.T) {
	tests := []struct {
		name      string
		special   SpecialTokens
		vocabSize int
		token     string
	}{
		// Qwen3: 151,643 BPE tokens + 26 added; no BOS.
		{"qwen3", SpecialTokens{BOS: -1, EOS: 151645, PAD: 151643, UNK: -1}, 151669, "<|im_start|>"},
		{"llama3", SpecialTokens{BOS: 128000, EOS: 128001, PAD: -1, UNK: -1}, 128256, "<|eot_id|>"},
		{"mistral", SpecialTokens{BOS: 1, EOS: 2, PAD: -1, UNK: 0}, 32000, "</s>"},
		{"gpt2style", SpecialTokens{BOS: 0, EOS: 0, PAD: -1, UNK: 0}, 65000, "<EOT>"},
	}
	for _, tc := range tests {
		tk := loadTestdata(t, tc.name, options{})
		if got := tk.Special(); got != tc.special {
			t.Errorf("%s: Special() = %+v, want %+v", tc.name, got, tc.special)
		}
		if got := tk.VocabSize(); got != tc.vocabSize {
			t.Errorf("%s: VocabSize() = %d, want %d", tc.name, got, tc.vocabSize)
		}
		id, ok := tk.TokenToID(tc.token)
		if !ok || !tk.IsSpecial(id) {
			t.Errorf("%s: %q: id %d, found %v, special %v", tc.name, tc.token, id, ok, tk.IsSpecial(id))
		}
		if back, ok := tk.IDToToken(id); !ok || back != tc.token {
			t.Errorf("%s: IDToToken(%d) = %q, %v", tc.name, id, back, ok)
		}
		if _, ok := tk.IDToToken(tc.vocabSize); ok {
			t.Errorf("%s: IDToToken(%d) found a token past the vocabulary", tc.name, tc.vocabSize)
		}
	}
	qwen := loadTestdata(t, "qwen3", options{})
	ids := qwen.Encode("<|im_start|>user\nhi<|im_end|>", false)
	if got, want := qwen.DecodeSkipSpecial(ids), "user\nhi"; got != want {
		t.Errorf("DecodeSkipSpecial = %q, want %q", got, want)
	}
	if !strings.Contains(qwen.Config().ChatTemplate, "<|im_start|>") {
		t.Error("Qwen3 chat template not read")
	}
}

func TestLoad(t *testing.T) {
	tokJSON, cfgJSON := testdataFiles(t, "mistral")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, "tokenizer.json")} {
		tk, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := tk.Encode("Hello", true); !cmp.Equal(got, []int{1, 22557}) {
			t.Errorf("Load(%s): Encode = %v", path, got)
		}
		if tk.Special().EOS != 2 {
			t.Errorf("Load(%s): config not read", path)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Load(missing) error = %v", err)
	}
}

// TestLoadErrors: bad or unsupported files are refused with the file, the
// JSON path and the component in the message.
func TestLoadErrors(t *testing.T) {
	bpe := func(parts map[string]any) []byte {
		return toyJSON(t, abcVocab, []string{"a b"}, nil, parts)
	}
	tests := []struct {
		name string
		tok  []byte
		cfg  string
		want []string
	}{
		{"not JSON", []byte("{"), "", []string{"toy/tokenizer.json", "unexpected end"}},
		{"WordPiece", []byte(`{"model": {"type": "WordPiece", "vocab": {}}}`), "",
			[]string{"toy/tokenizer.json", "model.type", `"WordPiece"`}},
		{"Unigram", []byte(`{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}`), "",
			[]string{"model.type", `"Unigram"`}},
		{"dropout", toyJSON(t, abcVocab, nil, map[string]any{"dropout": 0.1}, nil), "", []string{"model.dropout"}},
		{"merge of unknown token", toyJSON(t, abcVocab, []string{"a z"}, nil, nil), "",
			[]string{"model.merges[0]", `"z"`}},
		{"merge line", toyJSON(t, abcVocab, []string{"a b c"}, nil, nil), "", []string{"model.merges[0]", "two tokens"}},
		{"unk not in vocab", toyJSON(t, abcVocab, nil, map[string]any{"unk_token": "[UNK]"}, nil), "",
			[]string{"model.unk_token", "[UNK]"}},
		{"normalizer", bpe(map[string]any{"normalizer": map[string]any{"type": "Lowercase"}}), "",
			[]string{"toy/tokenizer.json", "normalizer", `"Lowercase"`, "NFC"}},
		{"nested pre-tokenizer", bpe(map[string]any{"pre_tokenizer": map[string]any{"type": "Sequence",
			"pretokenizers": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Digits"}}}}), "",
			[]string{"pre_tokenizer", "pretokenizers[1]", `"Digits"`}},
		{"bad regex", bpe(map[string]any{"pre_tokenizer": map[string]any{"type": "Split",
			"pattern": map[string]any{"Regex": "(a"}, "behavior": "Isolated"}}), "", []string{"pre_tokenizer", "(a"}},
		{"split behavior", bpe(map[string]any{"pre_tokenizer": map[string]any{"type": "Split",
			"pattern": map[string]any{"String": " "}, "behavior": "Sideways"}}), "", []string{"behavior", "Sideways"}},
		{"decoder", bpe(map[string]any{"decoder": map[string]any{"type": "WordPiece"}}), "",
			[]string{"decoder", `"WordPiece"`}},
		{"post-processor", bpe(map[string]any{"post_processor": map[string]any{"type": "BertProcessing"}}), "",
			[]string{"post_processor", `"BertProcessing"`}},
		{"template special token", bpe(map[string]any{"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}}, "special_tokens": map[string]any{}}}),
			"", []string{"post_processor", "single[0]", "<s>"}},
		{"added token id clash", bpe(map[string]any{"added_tokens": []any{map[string]any{"id": 2, "content": "<x>"}}}), "",
			[]string{"added_tokens[0]", "<x>", `"c"`}},
		{"config eos", bpe(nil), `{"eos_token": "</s>"}`, []string{"toy/tokenizer_config.json", "eos_token", "</s>"}},
		{"config chat_template", bpe(nil), `{"chat_template": 3}`, []string{"toy/tokenizer_config.json", "chat_template"}},
		{"config llama bos", bpe(nil), `{"tokenizer_class": "LlamaTokenizer"}`, []string{"add_bos_token", "bos_token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg []byte
			if tc.cfg != "" {
				cfg = []byte(tc.cfg)
			}
			_, err := FromJSON(tc.tok, cfg, "toy/tokenizer.json", "toy/tokenizer_config.json")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tk := loadTestdata(t, "qwen3", options{})
	g := loadCorpus(t)
	want := g.Tokenizers["qwen3"].IDs
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(g.Strings); i += 4 {
				if got := tk.Encode(g.Strings[i], true); !cmp.Equal(got, want[i]) {
					errs <- g.Strings[i]
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", s)
	}
}
