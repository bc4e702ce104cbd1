package tokenizer

import (
	"unicode/utf8"
)

// byteLevel is GPT-2's reversible map from the 256 byte values to 256
// printable runes. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map
// to themselves; the other 68 (controls, space, soft hyphen, ...) map in order
// to U+0100, U+0101, ... So a space becomes 'Ġ' (U+0120) and a newline 'Ċ'
// (U+010A). A byte-level vocabulary is written in these runes, which lets
// a BPE over "characters" work on arbitrary bytes.
type byteLevel struct {
	// enc[b] is the UTF-8 encoding of byte b's rune.
	enc [256]string
	// dec maps a rune back to its byte; only runes < 0x144 occur.
	dec [0x144]int16
}

func newByteLevel() *byteLevel {
	bl := &byteLevel{}
	for i := range bl.dec {
		bl.dec[i] = -1
	}
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		bl.enc[b] = string(r)
		bl.dec[r] = int16(b)
	}
	return bl
}

// encode appends the byte-level image of s to dst.
func (bl *byteLevel) encode(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = append(dst, bl.enc[s[i]]...)
	}
	return dst
}

func (bl *byteLevel) encodeString(s string) string {
	return string(bl.encode(make([]byte, 0, 2*len(s)), s))
}

// decodeToken appends the bytes that token stands for. A token holding a rune
// outside the byte-level alphabet (an added token such as "<|im_end|>" is
// inside it, but one with "▁" is not) is appended as its own UTF-8 bytes.
func (bl *byteLevel) decodeToken(dst []byte, token string) []byte {
	start := len(dst)
	for _, r := range token {
		if r >= rune(len(bl.dec)) || bl.dec[r] < 0 {
			return append(dst[:start], token...)
		}
		dst = append(dst, byte(bl.dec[r]))
	}
	return dst
}

// lossyUTF8 converts b to a string, replacing each maximal invalid
// subsequence with U+FFFD, as Rust's String::from_utf8_lossy and the WHATWG
// decoder do (a truncated 3-byte sequence becomes one U+FFFD, not two).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidPrefixLen(b[i:])
	}
	return string(out)
}

// invalidPrefixLen is the length of the maximal prefix of b that could start a
// valid UTF-8 sequence but does not complete one (at least 1).
func invalidPrefixLen(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		need = 2
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		c := b[n]
		if k == 0 && (c < lo || c > hi) || k > 0 && (c < 0x80 || c > 0xBF) {
			break
		}
		n++
	}
	return n
}
