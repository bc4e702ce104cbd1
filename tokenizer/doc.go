// Package tokenizer turns text into the token ids a Hugging Face causal
// language model was trained on, and back, from the model's tokenizer.json
// and tokenizer_config.json. It covers the byte-pair-encoding (BPE)
// tokenizers of GPT-2, Llama-3, Qwen2/Qwen3 (byte-level BPE) and of
// Llama-2/Mistral (SentencePiece-style BPE with byte fallback), and gives
// the same ids as the Rust `tokenizers` library that transformers uses.
//
// # The pipeline
//
// tokenizer.json describes a fixed pipeline of five stages; Encode runs them
// in order:
//
//  1. Added tokens. Strings listed in "added_tokens" (special tokens such as
//     <|im_start|> or <s>, and a few plain ones) are cut out of the text first
//     and map to one id each, so "<|im_end|>" in a chat transcript is one token
//     and never the characters "<", "|", ... Matching is leftmost-longest.
//     Flags refine it: lstrip/rstrip swallow the whitespace beside the token,
//     single_word refuses a match inside a word, and normalized=true tokens
//     are matched after normalization (step 2) instead of in the raw text.
//
//  2. Normalizer. Each section of text between added tokens is rewritten:
//     Unicode normalization (Qwen uses NFC, so "e" + U+0301 and "é" give the
//     same ids), or for SentencePiece vocabularies Prepend("▁") then
//     Replace(" " → "▁"), which marks word starts the way sentencepiece does.
//
//  3. Pre-tokenizer. The section is split into words; BPE never merges across
//     a word boundary. Split applies a regex: Llama-3 uses tiktoken's cl100k
//     pattern, which isolates contractions, letter runs (with one leading
//     non-letter, usually a space), digit groups of up to three, punctuation
//     runs, and newline runs; Qwen uses the same pattern with single digits.
//     ByteLevel then rewrites every byte of a word as one printable rune
//     (space → "Ġ", newline → "Ċ"), so the vocabulary covers all byte strings
//     with 256 base symbols; GPT-2's ByteLevel also splits with its own
//     regex. Metaspace is SentencePiece's variant of the space marker.
//     The three known regexes are matched by hand-written scanners that
//     follow Oniguruma's definitions exactly (\s is Unicode White_Space,
//     \p{L} and \p{N} the general categories); any other regex goes to
//     github.com/dlclark/regexp2.
//
//  4. Model (BPE). A word starts as one symbol per character. Repeatedly, the
//     adjacent pair of symbols that appears earliest in "merges" (the lowest
//     rank) is fused into one symbol, leftmost first among equals, until no
//     adjacent pair can merge; the symbols' ids are the output. Merges are
//     listed as "a b" strings or ["a", "b"] pairs. ignore_merges (Llama-3)
//     first looks the whole word up in the vocabulary. A character missing
//     from the vocabulary becomes its UTF-8 bytes as <0xXX> tokens when
//     byte_fallback is set (Llama-2, Mistral), else unk_token (runs of
//     unknowns fused into one with fuse_unk). Words are cached.
//
//  5. Post-processor. TemplateProcessing adds special tokens around the
//     sequence when Encode is asked to (Llama-2/Mistral put <s> first);
//     ByteLevel adds nothing. For transformers' Llama and Gemma tokenizer
//     classes, tokenizer_config.json's add_bos_token/add_eos_token decide
//     instead, as transformers does.
//
// Decode runs the decoder chain on the ids' token strings: ByteLevel maps the
// runes back to bytes; SentencePiece vocabularies use Replace("▁" → " "),
// ByteFallback (runs of <0xXX> back to UTF-8), Fuse and Strip (drop the
// leading space that Prepend added).
//
// # What is not supported
//
// WordPiece, Unigram and WordLevel models, BPE dropout, and the normalizers,
// pre-tokenizers, post-processors and decoders not named above are refused
// at load time with an error naming the file, the JSON path and the
// component. Truncation and padding in tokenizer.json are ignored, as
// transformers ignores them.
//
// Chat templates, and the token masks that restrict the loss to assistant
// turns, are in the subpackage chat.
//
// # Agreement with Hugging Face
//
// The golden tests compare every tokenizer in testdata/ with Hugging Face's
// @huggingface/tokenizers over 1,000 varied strings. Where that JavaScript
// port departs from the Rust library (its built-in GPT-2 regex uses
// ECMAScript's \s, and its case-insensitive groups fold ASCII only), this
// package follows Rust; those cases have their own tests. Character classes
// and normalization come from Go's Unicode 15.0 tables, so characters
// assigned after Unicode 15.0 may split or normalize differently from a
// library built on newer tables.
package tokenizer
