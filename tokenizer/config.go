package tokenizer

import (
	"encoding/json"
	"fmt"
)

type configJSON struct {
	BOSToken                  json.RawMessage   `json:"bos_token"`
	EOSToken                  json.RawMessage   `json:"eos_token"`
	PADToken                  json.RawMessage   `json:"pad_token"`
	UNKToken                  json.RawMessage   `json:"unk_token"`
	AdditionalSpecialTokens   []json.RawMessage `json:"additional_special_tokens"`
	AddBOSToken               *bool             `json:"add_bos_token"`
	AddEOSToken               *bool             `json:"add_eos_token"`
	ChatTemplate              json.RawMessage   `json:"chat_template"`
	ModelMaxLength            *float64          `json:"model_max_length"`
	TokenizerClass            string            `json:"tokenizer_class"`
	CleanUpTokenizationSpaces *bool             `json:"clean_up_tokenization_spaces"`
}

// tokenString reads a special token written as "<s>", as an AddedToken
// object {"content": "<s>", ...}, or as null.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or {\"content\": ...}, got %s", raw)
	}
	return obj.Content, nil
}

// llamaClasses are the transformers tokenizer classes whose constructor
// rebuilds the post-processor from add_bos_token (default true) and
// add_eos_token (default false), overriding tokenizer.json's.
var llamaClasses = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true,
	"CodeLlamaTokenizer": true, "CodeLlamaTokenizerFast": true,
	"GemmaTokenizer": true, "GemmaTokenizerFast": true,
}

// applyConfig reads tokenizer_config.json (nil when absent) and resolves the
// special token ids.
func (t *Tokenizer) applyConfig(data []byte, name string) error {
	t.ids = SpecialTokens{BOS: -1, EOS: -1, PAD: -1, UNK: int(t.model.unkID)}
	if data == nil {
		return nil
	}
	fail := func(key string, err error) error {
		return fmt.Errorf("tokenizer: %s: %s: %w", name, key, err)
	}
	var cj configJSON
	if err := json.Unmarshal(data, &cj); err != nil {
		return fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	c := &t.config
	c.Source = name
	for _, tk := range []struct {
		key  string
		raw  json.RawMessage
		name *string
		id   *int
	}{
		{"bos_token", cj.BOSToken, &c.BOSToken, &t.ids.BOS},
		{"eos_token", cj.EOSToken, &c.EOSToken, &t.ids.EOS},
		{"pad_token", cj.PADToken, &c.PADToken, &t.ids.PAD},
		{"unk_token", cj.UNKToken, &c.UNKToken, &t.ids.UNK},
	} {
		s, err := tokenString(tk.raw)
		if err != nil {
			return fail(tk.key, err)
		}
		if s == "" {
			continue
		}
		id, ok := t.tokenToID[s]
		if !ok {
			return fail(tk.key, fmt.Errorf("%q is not a token of %s", s, t.source))
		}
		*tk.name, *tk.id = s, id
	}
	for i, raw := range cj.AdditionalSpecialTokens {
		s, err := tokenString(raw)
		if err != nil {
			return fail(fmt.Sprintf("additional_special_tokens[%d]", i), err)
		}
		c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s)
	}
	c.AddBOSToken, c.AddEOSToken = cj.AddBOSToken, cj.AddEOSToken
	c.TokenizerClass = cj.TokenizerClass
	c.CleanUpTokenizationSpaces = cj.CleanUpTokenizationSpaces == nil || *cj.CleanUpTokenizationSpaces
	if cj.ModelMaxLength != nil {
		c.ModelMaxLength = *cj.ModelMaxLength
	}
	if err := c.readChatTemplate(cj.ChatTemplate); err != nil {
		return fail("chat_template", err)
	}
	if llamaClasses[c.TokenizerClass] {
		if err := t.llamaPostProcessor(); err != nil {
			return fail("add_bos_token/add_eos_token", err)
		}
	}
	return nil
}

// readChatTemplate accepts a template string or a list of named templates
// ([{"name": "default", "template": ...}, {"name": "tool_use", ...}]).
func (c *Config) readChatTemplate(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &c.ChatTemplate); err == nil {
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("want a string or a list of {name, template}: %w", err)
	}
	c.ChatTemplates = map[string]string{}
	for _, nt := range list {
		c.ChatTemplates[nt.Name] = nt.Template
	}
	c.ChatTemplate = c.ChatTemplates["default"]
	return nil
}

// llamaPostProcessor is transformers' LlamaTokenizerFast.update_post_processor:
// "<s> $A" with add_bos_token, "$A </s>" with add_eos_token.
func (t *Tokenizer) llamaPostProcessor() error {
	addBOS, addEOS := true, false
	if t.config.AddBOSToken != nil {
		addBOS = *t.config.AddBOSToken
	}
	if t.config.AddEOSToken != nil {
		addEOS = *t.config.AddEOSToken
	}
	var tp templatePost
	if addBOS {
		if t.ids.BOS < 0 {
			return fmt.Errorf("add_bos_token is true but bos_token is not set")
		}
		tp.items = append(tp.items, templateItem{ids: []int{t.ids.BOS}})
	}
	tp.items = append(tp.items, templateItem{sequence: true})
	if addEOS {
		if t.ids.EOS < 0 {
			return fmt.Errorf("add_eos_token is true but eos_token is not set")
		}
		tp.items = append(tp.items, templateItem{ids: []int{t.ids.EOS}})
	}
	t.post = tp
	return nil
}
