package data

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dszero/dszero/internal/splitmix"
)

//go:embed tinyshakespeare.txt
var tinyShakespeare []byte

// TinyShakespeare returns the embedded default corpus (public domain),
// tokenized by bytes.
func TinyShakespeare() *Corpus {
	return ByteCorpus("tinyshakespeare (embedded)", tinyShakespeare)
}

// Corpus is a stream of token ids.
type Corpus struct {
	Name  string
	Vocab int // size of the id space the corpus needs (max id + 1 for .bin, 256 for bytes)
	ids   []int32
}

// ByteCorpus tokenizes text byte by byte.
func ByteCorpus(name string, text []byte) *Corpus {
	ids := make([]int32, len(text))
	for i, b := range text {
		ids[i] = int32(b)
	}
	return &Corpus{Name: name, Vocab: 256, ids: ids}
}

// Len is the number of tokens.
func (c *Corpus) Len() int { return len(c.ids) }

// Load reads a corpus: a .bin file of uint16 ids (nanoGPT), or any other
// file as text.
func Load(path string) (*Corpus, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("data %s: no such file; give a text file or a nanoGPT .bin of uint16 token ids", path)
		}
		return nil, fmt.Errorf("data %s: %w", path, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("data %s: the file is empty", path)
	}
	if !strings.HasSuffix(path, ".bin") {
		return ByteCorpus(path, raw), nil
	}
	if len(raw)%2 != 0 {
		return nil, fmt.Errorf("data %s: %d bytes is not a whole number of uint16 token ids (nanoGPT .bin files hold 2 bytes per token)", path, len(raw))
	}
	c := &Corpus{Name: path, ids: make([]int32, len(raw)/2)}
	for i := range c.ids {
		id := binary.LittleEndian.Uint16(raw[2*i:])
		c.ids[i] = int32(id)
		if int(id)+1 > c.Vocab {
			c.Vocab = int(id) + 1
		}
	}
	return c, nil
}

// Layout is how global batches are split: B samples of T tokens per
// micro-batch, GAS micro-steps per optimizer step, World ranks.
type Layout struct {
	B, T, GAS, World int
}

// Loader produces a rank's micro-batches.
type Loader struct {
	c       *Corpus
	l       Layout
	windows int64
}

// NewLoader checks that the corpus can feed windows of T+1 tokens.
func NewLoader(c *Corpus, l Layout) (*Loader, error) {
	if l.B < 1 || l.T < 1 || l.GAS < 1 || l.World < 1 {
		return nil, fmt.Errorf("data: invalid batch layout %+v", l)
	}
	if c.Len() < l.T+1 {
		return nil, fmt.Errorf("data %s: %d tokens cannot fill one sequence of %d (+1 target); use a longer corpus or a shorter sequence", c.Name, c.Len(), l.T)
	}
	return &Loader{c: c, l: l, windows: int64((c.Len() - 1) / l.T)}, nil
}

// Micro fills inputs and targets (each B×T) for one rank's micro-batch of
// optimizer step `step` (0-based), micro-step `micro`.
func (ld *Loader) Micro(step, micro, rank int, inputs, targets []int32) {
	l := ld.l
	if len(inputs) < l.B*l.T || len(targets) < l.B*l.T {
		panic("data: short batch buffers")
	}
	mb := int64(micro*l.World + rank)
	base := ((int64(step)*int64(l.GAS))*int64(l.World) + mb) * int64(l.B)
	for b := 0; b < l.B; b++ {
		w := (base + int64(b)) % ld.windows
		off := int(w) * l.T
		copy(inputs[b*l.T:(b+1)*l.T], ld.c.ids[off:off+l.T])
		copy(targets[b*l.T:(b+1)*l.T], ld.c.ids[off+1:off+l.T+1])
	}
}

// Position is the number of samples consumed after `steps` optimizer steps
// (for checkpoints: the data position to resume from).
func (ld *Loader) Position(steps int) int64 {
	return int64(steps) * int64(ld.l.GAS) * int64(ld.l.World) * int64(ld.l.B)
}

// Random is a corpus of n token ids drawn uniformly from [0, vocab) with a
// seeded generator: the data of throughput benchmarks, where the text does
// not matter.
func Random(vocab, n int, seed uint64) *Corpus {
	c := &Corpus{Name: fmt.Sprintf("random tokens (vocab %d, seed %d)", vocab, seed), Vocab: vocab, ids: make([]int32, n)}
	x := seed*splitmix.Golden + 1
	for i := range c.ids {
		x += splitmix.Golden
		c.ids[i] = int32(splitmix.Mix(x) % uint64(vocab))
	}
	return c
}

// Epoch is how many passes over the corpus's windows `steps` optimizer
// steps have made (the Trainer's state.epoch).
func (ld *Loader) Epoch(steps int) float64 {
	return float64(ld.Position(steps)) / float64(ld.windows)
}
