package chat_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/tokenizer"
	"github.com/dszero/dszero/tokenizer/chat"
)

// The tokenizers and goldens live in the parent package's testdata.
var testdata = filepath.Join("..", "testdata")

var tokenizers sync.Map

func loadTokenizer(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	if tk, ok := tokenizers.Load(name); ok {
		return tk.(*tokenizer.Tokenizer)
	}
	raw, err := os.ReadFile(filepath.Join(testdata, name, "tokenizer.json.gz"))
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
	cfgPath := filepath.Join(testdata, name, "tokenizer_config.json")
	cfgJSON, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromJSON(tokJSON, cfgJSON, name+"/tokenizer.json", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tokenizers.Store(name, tk)
	return tk
}

func loadTemplate(t *testing.T, name string) (*chat.Template, *tokenizer.Tokenizer) {
	t.Helper()
	tk := loadTokenizer(t, name)
	tmpl, err := chat.FromTokenizer(tk)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl, tk
}

type chatGolden struct {
	Reference string `json:"reference"`
	Cases     []struct {
		Tokenizer           string `json:"tokenizer"`
		Conversation        int    `json:"conversation"`
		Messages            []struct{ Role, Content string }
		AddGenerationPrompt bool   `json:"add_generation_prompt"`
		Rendered            string `json:"rendered"`
		IDs                 []int  `json:"ids"`
	} `json:"cases"`
}

func messages(in []struct{ Role, Content string }) []chat.Message {
	out := make([]chat.Message, len(in))
	for i, m := range in {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// TestGoldenRender compares Render with @huggingface/jinja, and the ids of
// the rendered text with @huggingface/tokenizers, for the Qwen3 and Llama-3
// templates.
func TestGoldenRender(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testdata, "golden", "chat.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g chatGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range g.Cases {
		tmpl, tk := loadTemplate(t, c.Tokenizer)
		msgs := messages(c.Messages)
		got, err := tmpl.Render(msgs, c.AddGenerationPrompt)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Rendered {
			t.Errorf("%s conversation %d, generation prompt %v: (-want +got):\n%s",
				c.Tokenizer, c.Conversation, c.AddGenerationPrompt, cmp.Diff(c.Rendered, got))
		}
		if ids := tk.Encode(got, false); !cmp.Equal(ids, c.IDs) {
			t.Errorf("%s conversation %d: ids of the render differ (-want +got):\n%s",
				c.Tokenizer, c.Conversation, cmp.Diff(c.IDs, ids))
		}
		if c.AddGenerationPrompt {
			continue
		}
		ids, mask, err := tmpl.Tokenize(tk, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(ids, c.IDs) || len(mask) != len(ids) {
			t.Errorf("%s conversation %d: Tokenize ids differ from the reference", c.Tokenizer, c.Conversation)
		}
	}
}

// spans decodes each run of masked tokens.
func spans(tk *tokenizer.Tokenizer, ids []int, mask []bool) []string {
	var out []string
	for k := 0; k < len(ids); k++ {
		if !mask[k] {
			continue
		}
		j := k
		for j < len(ids) && mask[j] {
			j++
		}
		out = append(out, tk.Decode(ids[k:j]))
		k = j
	}
	return out
}

// TestAssistantMask checks which text the mask covers, written out from the
// templates: the assistant's content and its end-of-turn token; on Qwen3's
// last turn also the empty thinking block the template writes for it.
func TestAssistantMask(t *testing.T) {
	multi := []chat.Message{
		{Role: "system", Content: "You are a terse assistant."},
		{Role: "user", Content: "Name three primes."},
		{Role: "assistant", Content: "2, 3, 5."},
		{Role: "user", Content: "And the next one?"},
		{Role: "assistant", Content: "7."},
	}
	thinking := []chat.Message{
		{Role: "user", Content: "Q?"},
		{Role: "assistant", Content: "<think>\nhmm\n</think>\n\nA1"},
		{Role: "user", Content: "Again?"},
		{Role: "assistant", Content: "<think>\nhmm again\n</think>\n\nA2"},
	}
	tests := []struct {
		tokenizer string
		msgs      []chat.Message
		want      []string
	}{
		{"qwen3", multi, []string{"2, 3, 5.<|im_end|>", "<think>\n\n</think>\n\n7.<|im_end|>"}},
		// Qwen3 drops the thinking of earlier turns and keeps the last one's.
		{"qwen3", thinking, []string{"A1<|im_end|>", "<think>\nhmm again\n</think>\n\nA2<|im_end|>"}},
		// Llama-3 (base template: trims content, always ends with a header).
		{"llama3", multi, []string{"2, 3, 5.<|eot_id|>", "7.<|eot_id|>"}},
		{"llama3", []chat.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "  padded  "}},
			[]string{"padded<|eot_id|>"}},
	}
	for _, tc := range tests {
		tmpl, tk := loadTemplate(t, tc.tokenizer)
		ids, mask, err := tmpl.Tokenize(tk, tc.msgs)
		if err != nil {
			t.Fatal(err)
		}
		text, err := tmpl.Render(tc.msgs, false)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(ids, tk.Encode(text, false)) {
			t.Errorf("%s: Tokenize ids are not the ids of the rendered conversation", tc.tokenizer)
		}
		if got := spans(tk, ids, mask); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: assistant spans (-want +got):\n%s", tc.tokenizer, cmp.Diff(tc.want, got))
		}
	}
}

// mistralTemplate is Mistral-7B-Instruct-v0.1's chat template: no
// generation prompt, and the assistant's turn is its content then eos_token.
const mistralTemplate = "{{ bos_token }}{% for message in messages %}" +
	"{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
	"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
	"{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
	"{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}" +
	"{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"

func TestAssistantMaskMistral(t *testing.T) {
	tk := loadTokenizer(t, "mistral")
	tmpl, err := chat.New(mistralTemplate, map[string]string{"bos_token": "<s>", "eos_token": "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []chat.Message{
		{Role: "user", Content: "What is 2+2?"}, {Role: "assistant", Content: "4"},
		{Role: "user", Content: "And 3+3?"}, {Role: "assistant", Content: "It is 6."},
	}
	ids, mask, err := tmpl.Tokenize(tk, msgs)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := tmpl.Render(msgs, false)
	if want := "<s>[INST] What is 2+2? [/INST]4</s>[INST] And 3+3? [/INST]It is 6.</s>"; text != want {
		t.Fatalf("render = %q, want %q", text, want)
	}
	if !cmp.Equal(ids, tk.Encode(text, false)) {
		t.Error("Tokenize ids are not the ids of the rendered conversation")
	}
	if got, want := spans(tk, ids, mask), []string{"4</s>", "It is 6.</s>"}; !cmp.Equal(got, want) {
		t.Errorf("assistant spans (-want +got):\n%s", cmp.Diff(want, got))
	}
	if _, _, err := tmpl.Tokenize(tk, msgs[1:]); err == nil || !strings.Contains(err.Error(), "alternate") {
		t.Errorf("raise_exception from the template: error %v", err)
	}
}

func TestErrors(t *testing.T) {
	if _, err := chat.New("{% if %}", nil); err == nil || !strings.Contains(err.Error(), "chat_template") {
		t.Errorf("bad template: error %v", err)
	}
	tmpl, err := chat.New("{{ raise_exception('roles must alternate') }}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil, false); err == nil || !strings.Contains(err.Error(), "roles must alternate") {
		t.Errorf("raise_exception: error %v", err)
	}
	if _, err := chat.FromConfig(tokenizer.Config{Source: "base/tokenizer_config.json"}); err == nil ||
		!strings.Contains(err.Error(), "base/tokenizer_config.json") {
		t.Errorf("no template: error %v", err)
	}
	// A template that renders earlier turns differently once a later one
	// exists cannot be masked by prefixes; the error says which message.
	tmpl, err = chat.New(`{% for m in messages %}{% if loop.last %}[{{ m.content }}]{% else %}({{ m.content }}){% endif %}{% endfor %}{% if add_generation_prompt %}>{% endif %}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk := loadTokenizer(t, "qwen3")
	_, _, err = tmpl.Tokenize(tk, []chat.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}})
	if err == nil || !strings.Contains(err.Error(), "message 1") {
		t.Errorf("non-prefix template: error %v", err)
	}
}
