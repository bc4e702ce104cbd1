package quant

import "math"

// The quantized bytes and their float32 scales travel as 16-bit words
// (BF16 buffers that the collectives copy without reading them as
// numbers), as the compressed all-reduce's packed signs do: bytes two to
// a word (byte 2i in the low half of word i), a scale as the two words
// of its bits (low half first).

// WordsFor is the words that b bytes and s scales take.
func WordsFor(b, s int) int { return (b+1)/2 + 2*s }

// PutWords writes b then scales into w (WordsFor(len(b), len(scales))
// words).
func PutWords(w []uint16, b []byte, scales []float32) {
	n := len(b) / 2
	for i := range n {
		w[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	if len(b)%2 == 1 {
		w[n] = uint16(b[len(b)-1])
		n++
	}
	for i, s := range scales {
		u := math.Float32bits(s)
		w[n+2*i], w[n+2*i+1] = uint16(u), uint16(u>>16)
	}
}

// GetWords reads what PutWords wrote into b and scales.
func GetWords(b []byte, scales []float32, w []uint16) {
	n := len(b) / 2
	for i := range n {
		b[2*i], b[2*i+1] = byte(w[i]), byte(w[i]>>8)
	}
	if len(b)%2 == 1 {
		b[len(b)-1] = byte(w[n])
		n++
	}
	for i := range scales {
		scales[i] = math.Float32frombits(uint32(w[n+2*i]) | uint32(w[n+2*i+1])<<16)
	}
}
