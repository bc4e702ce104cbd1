package tokenizer

import (
	"strings"
)

// Tokenizer encodes text to token ids and back, as the Hugging Face
// tokenizer described by one tokenizer.json (and its tokenizer_config.json)
// does. It is safe for concurrent use.
type Tokenizer struct {
	source string // the file it was loaded from, for messages

	added *addedVocab
	norm  normalizer   // nil: none
	pre   preTokenizer // nil: none
	model *bpe
	post  postProcessor // nil: none
	dec   decoder       // nil: tokens joined with spaces

	idToToken []string // model vocab and added tokens; "" for unused ids
	tokenToID map[string]int
	special   map[int]bool // ids of added tokens with special=true

	bl     *byteLevel
	config Config
	ids    SpecialTokens
}

// addedVocab holds the added tokens and the two matchers that cut them out:
// raw matches tokens with normalized=false in the input text, normalized
// matches the others in each section's normalized text.
type addedVocab struct {
	tokens     []AddedToken
	raw        *addedMatcher
	normalized *addedMatcher
}

// SpecialTokens are the ids of the roles a trainer needs; -1 when the
// tokenizer has none (Qwen has no BOS; Llama-3 has no PAD).
type SpecialTokens struct {
	BOS, EOS, PAD, UNK int
}

// Config is what tokenizer.json does not say but tokenizer_config.json does.
type Config struct {
	Source                                 string // the tokenizer_config.json it came from; "" if none
	BOSToken, EOSToken, PADToken, UNKToken string // "" when unset
	AdditionalSpecialTokens                []string
	// AddBOSToken / AddEOSToken are nil when the file does not set them.
	AddBOSToken, AddEOSToken *bool
	// ChatTemplate is the default Jinja chat template; ChatTemplates holds
	// all named templates when the file gives a list of them.
	ChatTemplate  string
	ChatTemplates map[string]string
	// ModelMaxLength is model_max_length; transformers writes 1e30 for "none".
	ModelMaxLength float64
	TokenizerClass string
	// CleanUpTokenizationSpaces is what transformers' decode applies by
	// default (" ." → "." and the like); Decode here does not apply it.
	CleanUpTokenizationSpaces bool
}

// Encode returns the ids of text. With addSpecial, the post-processor's
// special tokens are added (Llama-2/Mistral's BOS); special tokens written in
// the text are always recognized, as in transformers.
//
// The steps, in the order Hugging Face runs them:
//  1. Added tokens with normalized=false are cut out of the raw text.
//  2. Each remaining section is normalized, and added tokens with
//     normalized=true are cut out of the result.
//  3. The pre-tokenizer splits each section into words.
//  4. BPE turns each word into ids.
//  5. The post-processor adds special tokens.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids := make([]int, 0, len(text)/3+4)
	var (
		secs, subs []section
		word       []byte
	)
	toModel := func(w piece) {
		if w.byteLevel {
			word = t.bl.encode(word[:0], w.s)
		} else {
			word = append(word[:0], w.s...)
		}
		ids = t.model.encode(ids, word)
	}
	secs = t.added.raw.split(secs, text, 0)
	for _, sec := range secs {
		if sec.id >= 0 {
			ids = append(ids, sec.id)
			continue
		}
		s := sec.s
		if t.norm != nil {
			s = t.norm.normalize(s)
		}
		subs = t.added.normalized.split(subs[:0], s, sec.start)
		for _, sub := range subs {
			switch {
			case sub.id >= 0:
				ids = append(ids, sub.id)
			case sub.s == "":
			case t.pre == nil:
				toModel(piece{s: sub.s})
			default:
				t.pre.preTokenize(piece{s: sub.s, first: sub.start == 0}, toModel)
			}
		}
	}
	if t.post != nil {
		ids = t.post.process(ids, addSpecial)
	}
	return ids
}

// Decode returns the text of ids, special tokens included. Unknown ids are
// skipped. Like the tokenizers library (and unlike transformers' default),
// it does not apply clean_up_tokenization_spaces.
func (t *Tokenizer) Decode(ids []int) string { return t.decode(ids, false) }

// DecodeSkipSpecial is Decode without the special tokens
// (skip_special_tokens=True).
func (t *Tokenizer) DecodeSkipSpecial(ids []int) string { return t.decode(ids, true) }

func (t *Tokenizer) decode(ids []int, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok || skipSpecial && t.special[id] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.dec.decodeChain(tokens), "")
}

// TokenToID returns the id of a token string (in the vocabulary's own
// spelling: "Ġthe" for a byte-level vocabulary, "▁the" for SentencePiece).
func (t *Tokenizer) TokenToID(token string) (int, bool) {
	id, ok := t.tokenToID[token]
	return id, ok
}

// IDToToken returns the token string of id.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) {
		return "", false
	}
	tok := t.idToToken[id]
	if tok == "" {
		// An unused id, unless the vocabulary really has an empty token.
		emptyID, ok := t.tokenToID[""]
		return "", ok && emptyID == id
	}
	return tok, true
}

// VocabSize is the number of ids in use plus holes, i.e. the largest id + 1
// (len(tokenizer) in transformers). The model's embedding may be larger.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// Special returns the ids of the BOS, EOS, PAD and UNK tokens named in
// tokenizer_config.json (UNK also from the model's unk_token).
func (t *Tokenizer) Special() SpecialTokens { return t.ids }

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool { return t.special[id] }

// AddedTokens returns the added tokens, in file order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added.tokens...)
}

// Config returns the settings read from tokenizer_config.json.
func (t *Tokenizer) Config() Config { return t.config }

// Source names the tokenizer.json the tokenizer was loaded from.
func (t *Tokenizer) Source() string { return t.source }
