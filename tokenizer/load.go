package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Load reads a tokenizer from a model directory (tokenizer.json and, if
// present, tokenizer_config.json) or from the path of a tokenizer.json, whose
// directory is then searched for tokenizer_config.json.
func Load(path string) (*Tokenizer, error) {
	tokPath := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		tokPath = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(tokPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w (a Hugging Face model directory has tokenizer.json; "+
			"a directory with only tokenizer.model or vocab.txt is not supported)", err)
	}
	cfgPath := filepath.Join(filepath.Dir(tokPath), "tokenizer_config.json")
	cfg, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		cfg, cfgPath = nil, ""
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return FromJSON(data, cfg, tokPath, cfgPath)
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (nil when there is none). The names are used in
// error messages.
func FromJSON(tokenizerJSON, configJSON []byte, tokenizerName, configName string) (*Tokenizer, error) {
	return fromJSON(tokenizerJSON, configJSON, tokenizerName, configName, options{})
}

// options are knobs for tests.
type options struct {
	genericRegex bool // match the known split regexes with regexp2 too
}

type fileJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
}

func fromJSON(data, cfgData []byte, name, cfgName string, opt options) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	fail := func(path string, err error) error {
		return fmt.Errorf("tokenizer: %s: %s: %w", name, path, err)
	}
	bl := newByteLevel()
	t := &Tokenizer{source: name, bl: bl}
	b := builder{opt: opt, bl: bl}

	model, err := buildBPE(f.Model)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	t.model = model
	if t.norm, err = b.normalizer(f.Normalizer); err != nil {
		return nil, fail("normalizer", err)
	}
	if t.pre, err = b.preTokenizer(f.PreTokenizer); err != nil {
		return nil, fail("pre_tokenizer", err)
	}
	if t.dec, err = b.decoder(f.Decoder); err != nil {
		return nil, fail("decoder", err)
	}

	// The id space: the model's vocab, then the added tokens.
	t.tokenToID = make(map[string]int, len(model.vocab)+len(f.AddedTokens))
	for tok, id := range model.vocab {
		t.tokenToID[tok] = int(id)
	}
	size := len(model.idToToken)
	t.special = map[int]bool{}
	for i, a := range f.AddedTokens {
		if a.Content == "" {
			return nil, fail(fmt.Sprintf("added_tokens[%d]", i), errors.New("empty content"))
		}
		if id, ok := model.vocab[a.Content]; ok {
			a.ID = int(id) // the model's id wins, as in Rust
		} else if a.ID < 0 {
			return nil, fail(fmt.Sprintf("added_tokens[%d]", i), fmt.Errorf("negative id %d", a.ID))
		} else if a.ID < len(model.idToToken) && model.idToToken[a.ID] != "" {
			return nil, fail(fmt.Sprintf("added_tokens[%d]", i), fmt.Errorf(
				"%q has id %d, which the vocab gives to %q", a.Content, a.ID, model.idToToken[a.ID]))
		}
		f.AddedTokens[i] = a
		t.tokenToID[a.Content] = a.ID
		size = max(size, a.ID+1)
		if a.Special {
			t.special[a.ID] = true
		}
	}
	t.idToToken = make([]string, size)
	copy(t.idToToken, model.idToToken)
	for _, a := range f.AddedTokens {
		t.idToToken[a.ID] = a.Content
	}
	t.added = &addedVocab{
		tokens: f.AddedTokens,
		raw: newAddedMatcher(f.AddedTokens, func(a AddedToken) string {
			if a.Normalized {
				return ""
			}
			return a.Content
		}),
		normalized: newAddedMatcher(f.AddedTokens, func(a AddedToken) string {
			if !a.Normalized {
				return ""
			}
			if t.norm != nil {
				return t.norm.normalize(a.Content)
			}
			return a.Content
		}),
	}

	if t.post, err = b.postProcessor(f.PostProcessor); err != nil {
		return nil, fail("post_processor", err)
	}
	if err := t.applyConfig(cfgData, cfgName); err != nil {
		return nil, err
	}
	return t, nil
}

func buildBPE(raw json.RawMessage) (*bpe, error) {
	if isNull(raw) {
		return nil, errors.New("model: missing")
	}
	var mj modelJSON
	if err := json.Unmarshal(raw, &mj); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if mj.Type == "" && mj.Merges != nil {
		mj.Type = "BPE" // old files leave the type out
	}
	if mj.Type != "BPE" {
		return nil, fmt.Errorf("model.type: unsupported model %q (supported: BPE; WordPiece, Unigram and WordLevel tokenizers are not)", mj.Type)
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout: %v is set; BPE dropout is random and unsupported (set it to null)", *mj.Dropout)
	}
	var vocab map[string]int
	if err := json.Unmarshal(mj.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("model.vocab: want an object of token → id: %w", err)
	}
	m := &bpe{vocab: make(map[string]int32, len(vocab)), unkID: -1,
		fuseUnk: mj.FuseUnk, byteFallback: mj.ByteFallback, ignoreMerges: mj.IgnoreMerges}
	maxID := -1
	for tok, id := range vocab {
		if id < 0 || id > 1<<30 {
			return nil, fmt.Errorf("model.vocab[%q]: id %d out of range", tok, id)
		}
		m.vocab[tok] = int32(id)
		maxID = max(maxID, id)
	}
	m.idToToken = make([]string, maxID+1)
	for tok, id := range vocab {
		if prev := m.idToToken[id]; prev != "" {
			return nil, fmt.Errorf("model.vocab: id %d is given to both %q and %q", id, prev, tok)
		}
		m.idToToken[id] = tok
	}
	if mj.ContinuingSubwordPrefix != nil {
		m.prefix = *mj.ContinuingSubwordPrefix
	}
	if mj.EndOfWordSuffix != nil {
		m.suffix = *mj.EndOfWordSuffix
	}
	if mj.UnkToken != nil {
		id, ok := m.vocab[*mj.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token: %q is not in the vocab", *mj.UnkToken)
		}
		m.unkID = id
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	m.splitBeforeMarker = markerSafe(m.vocab)
	pairs, err := parseMerges(mj.Merges)
	if err != nil {
		return nil, err
	}
	if err := m.buildMerges(pairs); err != nil {
		return nil, err
	}
	return m, nil
}

// parseMerges reads both merge formats: ["Ġ t", ...] (a space between the
// two tokens) and [["Ġ", "t"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	// The first element decides the format: "[[" or "[\"".
	inner := bytes.TrimSpace(raw)
	if len(inner) > 0 {
		inner = bytes.TrimSpace(inner[1:])
	}
	if len(inner) > 0 && inner[0] == '[' {
		var list [][]string
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("model.merges: want a list of [\"a\", \"b\"] pairs: %w", err)
		}
		pairs := make([][2]string, len(list))
		for i, p := range list {
			if len(p) != 2 {
				return nil, fmt.Errorf("model.merges[%d]: want a pair of strings, got %q", i, p)
			}
			pairs[i] = [2]string{p[0], p[1]}
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: want a list of \"a b\" strings: %w", err)
	}
	pairs := make([][2]string, 0, len(lines))
	for i, line := range lines {
		if strings.HasPrefix(line, "#version") {
			continue
		}
		a, b, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("model.merges[%d]: %q is not two tokens separated by one space", i, line)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}

func isNull(raw json.RawMessage) bool {
	r := bytes.TrimSpace(raw)
	return len(r) == 0 || string(r) == "null"
}

// builder turns the JSON components into pipeline stages.
type builder struct {
	opt options
	bl  *byteLevel
}

// component reads a component's "type" and its other fields.
func component(raw json.RawMessage) (string, map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", nil, err
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil {
		return "", nil, errors.New(`missing "type"`)
	}
	return typ, fields, nil
}

// field decodes fields[key] into v; absent or null leaves v unchanged.
func field(fields map[string]json.RawMessage, key string, v any) error {
	raw, ok := fields[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

func unsupported(kind, typ string, supported ...string) error {
	sort.Strings(supported)
	return fmt.Errorf("unsupported %s type %q (supported: %s)", kind, typ, strings.Join(supported, ", "))
}

func (b builder) pattern(fields map[string]json.RawMessage) (matcher, error) {
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := field(fields, "pattern", &p); err != nil {
		return nil, err
	}
	switch {
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		m, err := compileRegex(*p.Regex, b.opt.genericRegex)
		if err != nil {
			return nil, fmt.Errorf("pattern: %w", err)
		}
		return m, nil
	}
	return nil, errors.New(`pattern: want {"String": ...} or {"Regex": ...}`)
}

func (b builder) normalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, fields, err := component(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Prepend":
		var p prependNorm
		return p, field(fields, "prepend", &p.prefix)
	case "Replace":
		var r replaceNorm
		if r.pattern, err = b.pattern(fields); err != nil {
			return nil, err
		}
		return r, field(fields, "content", &r.content)
	case "Sequence":
		var list []json.RawMessage
		if err := field(fields, "normalizers", &list); err != nil {
			return nil, err
		}
		var seq sequenceNorm
		for i, item := range list {
			n, err := b.normalizer(item)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, unsupported("normalizer", typ, "NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace", "Sequence")
}

func (b builder) preTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, fields, err := component(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Split":
		sp := splitPre{}
		if sp.pattern, err = b.pattern(fields); err != nil {
			return nil, err
		}
		var beh string
		if err := field(fields, "behavior", &beh); err != nil {
			return nil, err
		}
		var ok bool
		if sp.behavior, ok = splitBehaviors[beh]; !ok {
			return nil, fmt.Errorf("behavior: unknown %q (want Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)", beh)
		}
		return sp, field(fields, "invert", &sp.invert)
	case "ByteLevel":
		addPrefix, useRegex := true, true
		if err := field(fields, "add_prefix_space", &addPrefix); err != nil {
			return nil, err
		}
		if err := field(fields, "use_regex", &useRegex); err != nil {
			return nil, err
		}
		p := byteLevelPre{addPrefixSpace: addPrefix}
		if useRegex {
			p.regex, _ = compileRegex(patGPT2, b.opt.genericRegex)
		}
		return p, nil
	case "Metaspace":
		return metaspace(fields)
	case "Sequence":
		var list []json.RawMessage
		if err := field(fields, "pretokenizers", &list); err != nil {
			return nil, err
		}
		seq := sequencePre{bl: b.bl}
		for i, item := range list {
			p, err := b.preTokenizer(item)
			if err != nil {
				return nil, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			if p != nil {
				seq.steps = append(seq.steps, p)
			}
		}
		return seq, nil
	}
	return nil, unsupported("pre-tokenizer", typ, "ByteLevel", "Metaspace", "Sequence", "Split")
}

func metaspace(fields map[string]json.RawMessage) (metaspacePre, error) {
	m := metaspacePre{replacement: "▁", prepend: prependAlways, split: true}
	if err := field(fields, "replacement", &m.replacement); err != nil {
		return m, err
	}
	if len([]rune(m.replacement)) != 1 {
		return m, fmt.Errorf("replacement: want one character, got %q", m.replacement)
	}
	scheme := ""
	if err := field(fields, "prepend_scheme", &scheme); err != nil {
		return m, err
	}
	switch scheme {
	case "", "always":
	case "first":
		m.prepend = prependFirst
	case "never":
		m.prepend = prependNever
	default:
		return m, fmt.Errorf("prepend_scheme: unknown %q (want always, first or never)", scheme)
	}
	var addPrefix *bool
	if err := field(fields, "add_prefix_space", &addPrefix); err != nil {
		return m, err
	}
	if addPrefix != nil && !*addPrefix {
		if scheme != "" && scheme != "never" {
			return m, fmt.Errorf("add_prefix_space=false contradicts prepend_scheme %q", scheme)
		}
		m.prepend = prependNever
	}
	return m, field(fields, "split", &m.split)
}

func (b builder) decoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, fields, err := component(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelDec{b.bl}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Replace":
		var d replaceDec
		if d.pattern, err = b.pattern(fields); err != nil {
			return nil, err
		}
		return d, field(fields, "content", &d.content)
	case "Strip":
		var content string
		d := stripDec{}
		if err := field(fields, "content", &content); err != nil {
			return nil, err
		}
		if r := []rune(content); len(r) != 1 {
			return nil, fmt.Errorf("content: want one character, got %q", content)
		} else {
			d.content = r[0]
		}
		if err := field(fields, "start", &d.start); err != nil {
			return nil, err
		}
		return d, field(fields, "stop", &d.stop)
	case "Metaspace":
		m, err := metaspace(fields)
		if err != nil {
			return nil, err
		}
		return metaspaceDec{[]rune(m.replacement)[0], m.prepend}, nil
	case "Sequence":
		var list []json.RawMessage
		if err := field(fields, "decoders", &list); err != nil {
			return nil, err
		}
		var seq sequenceDec
		for i, item := range list {
			d, err := b.decoder(item)
			if err != nil {
				return nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	}
	return nil, unsupported("decoder", typ, "ByteFallback", "ByteLevel", "Fuse", "Metaspace", "Replace", "Sequence", "Strip")
}

func (b builder) postProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, fields, err := component(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return nopPost{}, nil
	case "TemplateProcessing":
		var single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		}
		var specials map[string]struct {
			IDs []int `json:"ids"`
		}
		if err := field(fields, "single", &single); err != nil {
			return nil, err
		}
		if err := field(fields, "special_tokens", &specials); err != nil {
			return nil, err
		}
		var tp templatePost
		for i, it := range single {
			switch {
			case it.Sequence != nil:
				if it.Sequence.ID != "A" {
					return nil, fmt.Errorf("single[%d]: sequence %q in a single-sequence template (want A)", i, it.Sequence.ID)
				}
				tp.items = append(tp.items, templateItem{sequence: true})
			case it.SpecialToken != nil:
				st, ok := specials[it.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("single[%d]: special token %q is not in special_tokens", i, it.SpecialToken.ID)
				}
				tp.items = append(tp.items, templateItem{ids: st.IDs})
			default:
				return nil, fmt.Errorf("single[%d]: want SpecialToken or Sequence", i)
			}
		}
		return tp, nil
	case "Sequence":
		var list []json.RawMessage
		if err := field(fields, "processors", &list); err != nil {
			return nil, err
		}
		var seq sequencePost
		for i, item := range list {
			p, err := b.postProcessor(item)
			if err != nil {
				return nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	}
	return nil, unsupported("post-processor", typ, "ByteLevel", "Sequence", "TemplateProcessing")
}
