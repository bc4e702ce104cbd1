// Package chat renders a model's chat template (the Jinja "chat_template" of
// tokenizer_config.json) over a conversation, as transformers'
// apply_chat_template does, and tokenizes conversations for supervised
// fine-tuning with a mask of the tokens the assistant wrote, for "loss only
// on assistant tokens".
//
// # Rendering
//
// The template sees the variables transformers passes: messages (a list of
// {role, content, ...}), add_generation_prompt, and the special tokens that
// are set (bos_token, eos_token, pad_token, unk_token). With
// add_generation_prompt the template ends with the header that opens an
// assistant turn ("<|im_start|>assistant\n" for Qwen), which is what a model
// is given at inference time. The engine is github.com/ardanlabs/jinja.
//
// # The assistant mask
//
// Few templates mark the assistant's text ({% generation %} blocks), so
// Tokenize finds it by rendering the template over prefixes of the
// conversation, the way the fine-tuning frameworks do, and checks every
// step. The whole conversation T is rendered and tokenized once; those ids
// are the result. For each assistant message i:
//
//  1. Start: render messages[:i] with the generation prompt. That text must
//     be a prefix of T; the assistant's span starts where it ends. Whatever
//     the template writes for the assistant before its content (Qwen3's
//     empty "<think>\n\n</think>\n\n" block on the last turn) belongs to the
//     span, since the model has to produce it.
//  2. End of content: render T again with a marker character appended to
//     message i's content; T and that render agree up to the end of the
//     content as the template wrote it (after any trim), which locates it
//     even when the template rewrites earlier turns (Qwen3 drops their
//     thinking).
//  3. Closing text: render messages[:i+1] with and without the marker; what
//     follows the content there is the template's turn ending
//     ("<|im_end|>\n", "<|eot_id|>"). The span extends over the part of it
//     that T also has after the content, but stops after the first special
//     token in it: the end-of-turn token is the model's to learn, and what
//     follows (a newline, the next header) is layout.
//
// Byte offsets become token indices by tokenizing the prefix T[:offset] and
// comparing it with T's ids: a token that straddles an offset (rare, since
// templates put special tokens or newlines at turn boundaries) is counted in
// the assistant's span.
package chat

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/dszero/dszero/tokenizer"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant", "tool"
	Content string
	// Extra holds more fields for templates that read them
	// (reasoning_content, tool_calls, name, ...).
	Extra map[string]any
}

// Template is a compiled chat template with the special tokens it is given.
// It is safe for concurrent use.
type Template struct {
	tmpl *jinja.Template
	vars map[string]any
}

// New compiles a chat template. specialTokens maps variable names
// (bos_token, eos_token, ...) to token strings.
func New(source string, specialTokens map[string]string) (*Template, error) {
	if strings.TrimSpace(source) == "" {
		return nil, errors.New("chat: empty chat template")
	}
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat: compiling chat_template: %w", err)
	}
	vars := map[string]any{}
	for k, v := range specialTokens {
		if v != "" {
			vars[k] = v
		}
	}
	return &Template{tmpl: tmpl, vars: vars}, nil
}

// FromTokenizer compiles the default chat template of the tokenizer's
// tokenizer_config.json, with its special tokens.
func FromTokenizer(tk *tokenizer.Tokenizer) (*Template, error) {
	return FromConfig(tk.Config())
}

// FromConfig compiles the default chat template of a tokenizer_config.json,
// with its special tokens.
func FromConfig(cfg tokenizer.Config) (*Template, error) {
	source := cfg.Source
	if source == "" {
		source = "the tokenizer (no tokenizer_config.json)"
	}
	if cfg.ChatTemplate == "" {
		return nil, fmt.Errorf("chat: %s has no chat_template (a base model's tokenizer usually has none; "+
			"use the model's instruct variant or give a template)", source)
	}
	t, err := New(cfg.ChatTemplate, map[string]string{
		"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken,
		"pad_token": cfg.PADToken, "unk_token": cfg.UNKToken,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return t, nil
}

// Render returns the template's text for msgs.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		d := make(map[string]any, 2+len(m.Extra))
		for k, v := range m.Extra {
			d[k] = v
		}
		d["role"], d["content"] = m.Role, m.Content
		list[i] = d
	}
	data := make(map[string]any, len(t.vars)+2)
	for k, v := range t.vars {
		data[k] = v
	}
	data["messages"] = list
	data["add_generation_prompt"] = addGenerationPrompt
	out, err := t.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("chat: rendering %d messages: %w", len(msgs), err)
	}
	return out, nil
}

// Encoder is the part of a tokenizer that Tokenize needs.
type Encoder interface {
	Encode(text string, addSpecial bool) []int
	IsSpecial(id int) bool
}

var _ Encoder = (*tokenizer.Tokenizer)(nil)

// marker is appended to an assistant message's content to find where the
// template wrote it; it is a noncharacter, which no real text holds.
const marker = "\U0010FFFF"

// Tokenize renders msgs (without a generation prompt), tokenizes the text as
// apply_chat_template(tokenize=True) does (no extra special tokens: the
// template writes them), and returns the ids with assistant[k] true for the
// tokens of assistant turns. The package comment explains the method.
func (t *Template) Tokenize(enc Encoder, msgs []Message) (ids []int, assistant []bool, err error) {
	full, err := t.Render(msgs, false)
	if err != nil {
		return nil, nil, err
	}
	ids = enc.Encode(full, false)
	assistant = make([]bool, len(ids))
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		lo, hi, err := t.assistantSpan(enc, msgs, i, full, ids)
		if err != nil {
			return nil, nil, fmt.Errorf("chat: message %d (assistant): %w", i, err)
		}
		for k := lo; k < hi; k++ {
			assistant[k] = true
		}
	}
	return ids, assistant, nil
}

// assistantSpan returns the token range [lo, hi) of assistant message i.
func (t *Template) assistantSpan(enc Encoder, msgs []Message, i int, full string, ids []int) (lo, hi int, err error) {
	// 1. Start: the prompt up to the generation header.
	start := 0
	if i > 0 {
		prompt, err := t.Render(msgs[:i], true)
		if err != nil {
			return 0, 0, err
		}
		if !strings.HasPrefix(full, prompt) {
			return 0, 0, fmt.Errorf("the template's text for the conversation before it, with the generation " +
				"prompt, is not a prefix of the text of the whole conversation, so its start cannot be found")
		}
		start = len(prompt)
	}
	// 2. End of content.
	marked := withMarker(msgs, i)
	fullMarked, err := t.Render(marked, false)
	if err != nil {
		return 0, 0, err
	}
	contentEnd := commonPrefix(full, fullMarked)
	if contentEnd < start {
		return 0, 0, fmt.Errorf("its content ends (byte %d) before its turn starts (byte %d)", contentEnd, start)
	}
	// 3. The turn's closing text, as far as the whole conversation has it.
	last, err := t.Render(msgs[:i+1], false)
	if err != nil {
		return 0, 0, err
	}
	lastMarked, err := t.Render(marked[:i+1], false)
	if err != nil {
		return 0, 0, err
	}
	closing := last[commonPrefix(last, lastMarked):]
	end := contentEnd + commonPrefix(full[contentEnd:], closing)

	lo = tokenBoundary(enc, full[:start], ids, false)
	mid := tokenBoundary(enc, full[:contentEnd], ids, true)
	hi = tokenBoundary(enc, full[:end], ids, true)
	for k := mid; k < hi; k++ {
		if enc.IsSpecial(ids[k]) {
			hi = k + 1
			break
		}
	}
	return lo, max(hi, lo), nil
}

// withMarker returns a copy of msgs with the marker after message i's content.
func withMarker(msgs []Message, i int) []Message {
	out := append([]Message(nil), msgs...)
	out[i].Content += marker
	return out
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for k := 0; k < n; k++ {
		if a[k] != b[k] {
			return k
		}
	}
	return n
}

// tokenBoundary returns the number of ids that lie before the end of prefix:
// the ids that prefix alone tokenizes to and full's ids share. When a token
// straddles the end, includeStraddler counts it.
func tokenBoundary(enc Encoder, prefix string, ids []int, includeStraddler bool) int {
	p := enc.Encode(prefix, false)
	k := 0
	for k < len(p) && k < len(ids) && p[k] == ids[k] {
		k++
	}
	if k < len(p) && includeStraddler && k < len(ids) {
		k++
	}
	return k
}
