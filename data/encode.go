package data

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/tokenizer"
	"github.com/dszero/dszero/tokenizer/chat"
)

// Tokenizer is what fine-tuning data needs of a tokenizer; a
// *tokenizer.Tokenizer is one.
type Tokenizer interface {
	chat.Encoder
	Special() tokenizer.SpecialTokens
	Config() tokenizer.Config
}

var _ Tokenizer = (*tokenizer.Tokenizer)(nil)

// AlpacaTemplate is the chat template used for alpaca records when the
// tokenizer has none (a base model's): LLaMA-Factory's "alpaca" template,
// i.e. the Stanford Alpaca prompt. Each turn is
//
//	### Instruction:\n{user}\n\n### Response:\n{assistant}{eos_token}\n\n
//
// after the system message, or this default system text when there is none:
// "Below is an instruction that describes a task. Write a response that
// appropriately completes the request.\n\n". Like LLaMA-Factory's, it writes
// no BOS and the system message verbatim. (The turn's closing "\n\n" is a
// string expression because github.com/ardanlabs/jinja v1.8.0 drops a
// newline that follows "}}" at the end of a for-loop body, which Jinja
// keeps.)
const AlpacaTemplate = "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% set turns = messages[1:] %}" +
	"{% else %}Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n" +
	"{% set turns = messages %}{% endif %}" +
	"{% for m in turns %}{% if m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n### Response:\n" +
	"{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{{ '\\n\\n' }}{% endif %}{% endfor %}"

// encoder tokenizes examples into samples.
type encoder struct {
	tok           Tokenizer
	tmpl          *chat.Template // the tokenizer's chat template, or the one given; nil if none
	alpaca        *chat.Template // AlpacaTemplate, for alpaca records when tmpl is nil
	eos           int            // -1: none
	trainOnPrompt bool
}

// sample is one tokenized record: its ids and, for each, the label (the id
// itself, or IgnoreIndex where the token takes no loss). The model predicts
// labels[k+1] at position k.
type sample struct {
	ids, labels []int32
	// prefixMismatch: the prompt's tokens were not a prefix of the whole
	// record's (trl warns; the mask still cuts at the prompt's length).
	prefixMismatch bool
}

// targets is the number of labels a model predicts: all but the first.
func (s *sample) targets() int {
	n := 0
	for _, l := range s.labels[min(1, len(s.labels)):] {
		if l != model.IgnoreIndex {
			n++
		}
	}
	return n
}

func (e *encoder) encode(ex *example) (sample, error) {
	switch ex.kind {
	case kindText:
		ids := e.withEOS(e.tok.Encode(ex.Text, true))
		return e.masked(ids, 0), nil
	case kindPromptText:
		// trl: the prompt and prompt+completion are tokenized with the
		// tokenizer's special tokens; EOS ends the completion.
		prompt := e.tok.Encode(ex.Prompt, true)
		ids := e.withEOS(e.tok.Encode(ex.Prompt+ex.Response, true))
		s := e.masked(ids, len(prompt))
		s.prefixMismatch = !hasPrefix(ids, prompt)
		return s, nil
	case kindPromptChat:
		// trl: the prompt rendered with the generation prompt; the loss
		// covers everything after it.
		tmpl, err := e.template(ex)
		if err != nil {
			return sample{}, err
		}
		pText, err := tmpl.Render(ex.Messages[:ex.PromptLen], true)
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", ex.Loc, err)
		}
		full, err := tmpl.Render(ex.Messages, false)
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", ex.Loc, err)
		}
		prompt := e.tok.Encode(pText, false)
		ids := e.tok.Encode(full, false)
		s := e.masked(ids, len(prompt))
		s.prefixMismatch = !strings.HasPrefix(full, pText) || !hasPrefix(ids, prompt)
		return s, nil
	case kindChat:
		tmpl, err := e.template(ex)
		if err != nil {
			return sample{}, err
		}
		ids, assistant, err := tmpl.Tokenize(e.tok, ex.Messages)
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", ex.Loc, err)
		}
		s := sample{ids: make([]int32, len(ids)), labels: make([]int32, len(ids))}
		for k, id := range ids {
			s.ids[k] = int32(id)
			s.labels[k] = model.IgnoreIndex
			if assistant[k] || e.trainOnPrompt {
				s.labels[k] = int32(id)
			}
		}
		return s, nil
	}
	return sample{}, fmt.Errorf("%s: unknown example kind %d", ex.Loc, ex.kind)
}

// template picks the chat template for a conversation.
func (e *encoder) template(ex *example) (*chat.Template, error) {
	if e.tmpl != nil {
		return e.tmpl, nil
	}
	if e.alpaca != nil && ex.fromAlpaca {
		return e.alpaca, nil
	}
	return nil, fmt.Errorf("%s: conversations are rendered with the tokenizer's chat template, and %s has none "+
		"(a base model's tokenizer usually has none); use the instruct model's tokenizer or give a chat template",
		ex.Loc, tokSource(e.tok))
}

func tokSource(t Tokenizer) string {
	if s := t.Config().Source; s != "" {
		return s
	}
	return "the tokenizer"
}

// withEOS appends EOS unless the ids already end with it (trl adds the EOS
// text unless the text already ends with it).
func (e *encoder) withEOS(ids []int) []int {
	if e.eos >= 0 && (len(ids) == 0 || ids[len(ids)-1] != e.eos) {
		ids = append(ids, e.eos)
	}
	return ids
}

// masked labels ids[promptLen:] (all of them with trainOnPrompt).
func (e *encoder) masked(ids []int, promptLen int) sample {
	if e.trainOnPrompt {
		promptLen = 0
	}
	s := sample{ids: make([]int32, len(ids)), labels: make([]int32, len(ids))}
	for k, id := range ids {
		s.ids[k] = int32(id)
		s.labels[k] = model.IgnoreIndex
		if k >= promptLen {
			s.labels[k] = int32(id)
		}
	}
	return s
}

func hasPrefix(ids, prefix []int) bool {
	if len(prefix) > len(ids) {
		return false
	}
	for k, id := range prefix {
		if ids[k] != id {
			return false
		}
	}
	return true
}
