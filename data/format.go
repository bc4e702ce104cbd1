package data

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dszero/dszero/tokenizer/chat"
)

// Format is the shape of a fine-tuning record.
type Format string

const (
	// FormatAuto detects the format from the first record's fields.
	FormatAuto Format = ""
	// FormatText is {"text": ...}: language modelling, loss on every token.
	FormatText Format = "text"
	// FormatAlpaca is {"instruction", "input", "output", "system"?,
	// "history"?} (Stanford Alpaca, LLaMA-Factory's "alpaca" formatting).
	FormatAlpaca Format = "alpaca"
	// FormatMessages is {"messages": [{"role", "content"}, ...]} (trl's
	// conversational format, OpenAI chat).
	FormatMessages Format = "messages"
	// FormatShareGPT is {"conversations": [{"from", "value"}, ...]} with
	// from = human, gpt, system, observation or function_call.
	FormatShareGPT Format = "sharegpt"
	// FormatPromptCompletion is {"prompt", "completion"}, both strings or
	// both message lists (trl's prompt-completion format).
	FormatPromptCompletion Format = "prompt_completion"
)

var formats = []Format{FormatText, FormatAlpaca, FormatMessages, FormatShareGPT, FormatPromptCompletion}

// ParseFormat reads a format name; "" and "auto" mean detect.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case "", "auto":
		return FormatAuto, nil
	case "conversations":
		return FormatShareGPT, nil
	case "prompt-completion", "completion":
		return FormatPromptCompletion, nil
	default:
		for _, k := range formats {
			if f == k {
				return f, nil
			}
		}
	}
	return "", fmt.Errorf("data: unknown format %q; use auto, text, alpaca, messages, sharegpt or prompt_completion", s)
}

// detectFormat picks the format from a record's fields, in the order the
// frameworks check them: conversations first, then prompt-completion,
// alpaca and plain text.
func detectFormat(rec Record) (Format, error) {
	has := func(k string) bool { _, ok := rec.Fields[k]; return ok }
	switch {
	case has("messages"):
		return FormatMessages, nil
	case has("conversations"):
		return FormatShareGPT, nil
	case has("prompt") && has("completion"):
		return FormatPromptCompletion, nil
	case has("instruction") && has("output"):
		return FormatAlpaca, nil
	case has("text"):
		return FormatText, nil
	}
	keys := make([]string, 0, len(rec.Fields))
	for k := range rec.Fields {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	sort.Strings(keys)
	return "", fmt.Errorf("%s: cannot tell the data format from the fields {%s}; records need \"text\" (plain text), "+
		"\"instruction\"+\"output\" (alpaca), \"messages\" (chat), \"conversations\" (sharegpt) or \"prompt\"+\"completion\"; "+
		"rename the fields or give the format", rec.Loc, strings.Join(keys, ", "))
}

// exampleKind is how an example is tokenized.
type exampleKind uint8

const (
	kindText       exampleKind = iota // Text, loss on all tokens, EOS appended
	kindChat                          // Messages through the chat template, loss on assistant tokens
	kindPromptText                    // Prompt+Completion strings, loss on the completion, EOS appended
	kindPromptChat                    // Messages[:PromptLen] is the prompt, the rest the completion
)

// example is one record in a form the tokenizer can take.
type example struct {
	Loc       Location
	kind      exampleKind
	Text      string         // kindText
	Prompt    string         // kindPromptText
	Response  string         // kindPromptText
	Messages  []chat.Message // kindChat, kindPromptChat
	PromptLen int            // kindPromptChat: messages of the prompt
	// fromAlpaca: the conversation came from an alpaca record, which
	// AlpacaTemplate may render when the tokenizer has no template.
	fromAlpaca bool
}

// fieldErr is a bad field of a record.
func fieldErr(rec Record, field, format string, args ...any) error {
	return fmt.Errorf("%s: field %q %s", rec.Loc, field, fmt.Sprintf(format, args...))
}

// str reads a string field. A missing or null field is "" when optional.
func str(rec Record, field string, required bool, hint string) (string, error) {
	v, ok := rec.Fields[field]
	if !ok || v == nil {
		if required {
			what := "is missing"
			if ok {
				what = "is null"
			}
			return "", fieldErr(rec, field, "%s; %s", what, hint)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fieldErr(rec, field, "is %s, want a string; %s", typeName(v), hint)
	}
	if !utf8.ValidString(s) {
		return "", fieldErr(rec, field, "is not valid UTF-8; re-encode the data as UTF-8")
	}
	return s, nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// toExample converts a record of the given format.
func toExample(rec Record, f Format) (example, error) {
	ex := example{Loc: rec.Loc}
	if f != FormatText && hasTools(rec.Fields["tools"]) {
		// trl hands "tools" to the chat template, which writes the tool
		// schemas into the prompt; training without them would change
		// what the model is taught to answer.
		return ex, fmt.Errorf("%s: field \"tools\" is set, and tool definitions are not passed to chat templates yet; "+
			"drop the field or render the tools into the system message", rec.Loc)
	}
	switch f {
	case FormatText:
		s, err := str(rec, "text", true, "plain-text records are {\"text\": \"...\"}")
		if err != nil {
			return ex, err
		}
		ex.kind, ex.Text = kindText, s
	case FormatAlpaca:
		msgs, err := alpacaMessages(rec)
		if err != nil {
			return ex, err
		}
		ex.kind, ex.Messages, ex.fromAlpaca = kindChat, msgs, true
	case FormatMessages, FormatShareGPT:
		field := "messages"
		if f == FormatShareGPT {
			field = "conversations"
		}
		msgs, err := messageList(rec, field, f == FormatShareGPT)
		if err != nil {
			return ex, err
		}
		if f == FormatShareGPT {
			if err := checkShareGPTTurns(rec, field, msgs); err != nil {
				return ex, err
			}
		}
		ex.kind, ex.Messages = kindChat, msgs
	case FormatPromptCompletion:
		return promptCompletion(rec)
	default:
		return ex, fmt.Errorf("%s: unknown format %q", rec.Loc, f)
	}
	return ex, nil
}

// hasTools reports whether a "tools" field holds any tool.
func hasTools(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case string:
		s := strings.TrimSpace(t)
		return s != "" && s != "[]" && s != "null"
	case []any:
		return len(t) > 0
	case map[string]any:
		return len(t) > 0
	}
	return true
}

const alpacaHint = "alpaca records are {\"instruction\": ..., \"input\": ..., \"output\": ...}"

// alpacaMessages turns an alpaca record into a conversation as
// LLaMA-Factory's AlpacaDatasetConverter does: the history pairs as earlier
// user/assistant turns, then instruction and input joined by "\n" (each
// only if non-empty) as the user turn and output as the assistant turn, with
// the system field as a system message.
func alpacaMessages(rec Record) ([]chat.Message, error) {
	instr, err := str(rec, "instruction", true, alpacaHint)
	if err != nil {
		return nil, err
	}
	input, err := str(rec, "input", false, alpacaHint)
	if err != nil {
		return nil, err
	}
	output, err := str(rec, "output", true, alpacaHint)
	if err != nil {
		return nil, err
	}
	system, err := str(rec, "system", false, "the system prompt is a string")
	if err != nil {
		return nil, err
	}
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	if h, ok := rec.Fields["history"]; ok && h != nil {
		const hint = "history is a list of [prompt, response] pairs"
		list, ok := h.([]any)
		if !ok {
			return nil, fieldErr(rec, "history", "is %s; %s", typeName(h), hint)
		}
		for i, p := range list {
			pair, ok := p.([]any)
			if !ok || len(pair) != 2 {
				return nil, fieldErr(rec, "history", "entry %d is not a [prompt, response] pair; %s", i, hint)
			}
			for j, role := range []string{"user", "assistant"} {
				s, ok := pair[j].(string)
				if !ok {
					return nil, fieldErr(rec, "history", "entry %d item %d is %s, want a string; %s", i, j, typeName(pair[j]), hint)
				}
				if !utf8.ValidString(s) {
					return nil, fieldErr(rec, "history", "entry %d is not valid UTF-8", i)
				}
				msgs = append(msgs, chat.Message{Role: role, Content: s})
			}
		}
	}
	var query []string
	for _, s := range []string{instr, input} {
		if s != "" {
			query = append(query, s)
		}
	}
	return append(msgs,
		chat.Message{Role: "user", Content: strings.Join(query, "\n")},
		chat.Message{Role: "assistant", Content: output}), nil
}

// shareGPTRoles maps sharegpt's "from" tags to chat-template roles, as
// LLaMA-Factory's default tags do (human → user, gpt → assistant,
// observation → its observation role, function_call → its function role);
// chat templates call a tool result "tool", and a function call is the
// assistant's turn. The standard role names map to themselves.
var shareGPTRoles = map[string]string{
	"human": "user", "user": "user",
	"gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
	"system":      "system",
	"observation": "tool", "tool": "tool", "function_response": "tool",
	"function_call": "assistant",
}

// messageList reads a list of {role, content} or {from, value} messages.
// Other keys of a message (reasoning_content, tool_calls, name, ...) go to
// the template as Message.Extra.
func messageList(rec Record, field string, sharegpt bool) ([]chat.Message, error) {
	hint := "chat records are {\"" + field + "\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}"
	if sharegpt {
		hint = "sharegpt records are {\"conversations\": [{\"from\": \"human\", \"value\": \"...\"}, ...]}"
	}
	v, ok := rec.Fields[field]
	if !ok || v == nil {
		return nil, fieldErr(rec, field, "is missing; %s", hint)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fieldErr(rec, field, "is %s, want a list of messages; %s", typeName(v), hint)
	}
	if len(list) == 0 {
		return nil, fieldErr(rec, field, "is an empty list; %s", hint)
	}
	msgs := make([]chat.Message, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fieldErr(rec, field, "message %d is %s, want an object; %s", i, typeName(e), hint)
		}
		roleKey, contentKey := "role", "content"
		if _, ok := m["role"]; !ok {
			if _, ok := m["from"]; ok {
				roleKey, contentKey = "from", "value"
			}
		}
		role, ok := m[roleKey].(string)
		if !ok {
			return nil, fieldErr(rec, field, "message %d has no %q string; %s", i, roleKey, hint)
		}
		mapped, known := shareGPTRoles[strings.ToLower(role)]
		if !known {
			return nil, fieldErr(rec, field, "message %d has role %q; use user/human, assistant/gpt, system, or tool/observation", i, role)
		}
		content := ""
		switch c := m[contentKey].(type) {
		case string:
			content = c
		case nil:
			// An assistant turn that only calls tools has no content.
		default:
			return nil, fieldErr(rec, field, "message %d: %q is %s, want a string (multimodal content lists are not supported)",
				i, contentKey, typeName(c))
		}
		if !utf8.ValidString(content) {
			return nil, fieldErr(rec, field, "message %d is not valid UTF-8; re-encode the data as UTF-8", i)
		}
		msg := chat.Message{Role: mapped, Content: content}
		for k, x := range m {
			if k != roleKey && k != contentKey {
				if msg.Extra == nil {
					msg.Extra = map[string]any{}
				}
				msg.Extra[k] = x
			}
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// checkShareGPTTurns applies LLaMA-Factory's sharegpt rule: after an
// optional leading system message, turns alternate user (or tool result)
// and assistant, starting with the user and ending with the assistant.
// LLaMA-Factory skips a record that breaks it with a warning; here it is an
// error, so no record is lost silently.
func checkShareGPTTurns(rec Record, field string, msgs []chat.Message) error {
	turns := msgs
	if turns[0].Role == "system" {
		turns = turns[1:]
	}
	for i, m := range turns {
		want := "user or tool"
		ok := m.Role == "user" || m.Role == "tool"
		if i%2 == 1 {
			want, ok = "assistant", m.Role == "assistant"
		}
		if !ok {
			return fieldErr(rec, field, "message %d is %s where the turns need %s (sharegpt turns alternate human, gpt, human, gpt, ...)",
				i+len(msgs)-len(turns), m.Role, want)
		}
	}
	if len(turns) == 0 || len(turns)%2 != 0 {
		return fieldErr(rec, field, "has %d turns after the system message; a sharegpt conversation ends with the assistant (gpt), "+
			"so it needs an even number", len(turns))
	}
	return nil
}

// promptCompletion reads trl's prompt-completion record: two strings, or two
// message lists (the conversational form).
func promptCompletion(rec Record) (example, error) {
	ex := example{Loc: rec.Loc}
	const hint = "prompt-completion records are {\"prompt\": \"...\", \"completion\": \"...\"} or both lists of messages"
	p, c := rec.Fields["prompt"], rec.Fields["completion"]
	_, pList := p.([]any)
	_, cList := c.([]any)
	switch {
	case pList && cList:
		prompt, err := messageList(rec, "prompt", false)
		if err != nil {
			return ex, err
		}
		completion, err := messageList(rec, "completion", false)
		if err != nil {
			return ex, err
		}
		ex.kind, ex.Messages, ex.PromptLen = kindPromptChat, append(prompt, completion...), len(prompt)
		return ex, nil
	case pList != cList:
		return ex, fmt.Errorf("%s: \"prompt\" is %s and \"completion\" is %s; both must be strings or both lists of messages",
			rec.Loc, typeName(p), typeName(c))
	}
	var err error
	if ex.Prompt, err = str(rec, "prompt", true, hint); err != nil {
		return ex, err
	}
	if ex.Response, err = str(rec, "completion", true, hint); err != nil {
		return ex, err
	}
	ex.kind = kindPromptText
	return ex, nil
}
