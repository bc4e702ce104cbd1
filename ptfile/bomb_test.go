package ptfile

import (
	"archive/zip"
	"bytes"
	"errors"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
)

// withPickle is small(t) with data.pkl replaced by e (named for it).
func withPickle(t testing.TB, e rawEntry) []byte {
	e.name = "ckpt/data.pkl"
	var es []rawEntry
	for _, x := range entriesOf(t, small(t)) {
		r := rawEntry{name: x.name, method: zip.Store, data: x.data, crc: crc32.ChecksumIEEE(x.data), size: uint64(len(x.data))}
		if x.name == e.name {
			r = e
		}
		es = append(es, r)
	}
	return zipRaw(t, es...)
}

// allocated is the bytes allocated while fn runs (a count, not a timing).
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestInflationBombs: a compressed data.pkl is refused by its declared
// size before it is inflated, and inflated no further than that size; a
// pickle that builds more values than Options.MaxValues stops when it
// reaches the limit; each is an error naming the file and entry, with the
// option that would accept it, and the memory a read takes stays near
// the limits, not near what the entry would inflate to.
func TestInflationBombs(t *testing.T) {
	// 64 MiB of NONE opcodes deflate to about 64 KiB.
	nones := append(append([]byte("\x80\x02"), bytes.Repeat([]byte("N"), 64<<20)...), '.')
	bomb := deflate(t, nones)
	crc := crc32.ChecksumIEEE(nones)
	few := nones[len(nones)-4<<20:] // 4 MiB of them: what MaxPickleBytes lets through
	few[0], few[1] = 0x80, 0x02
	cases := []struct {
		name   string
		file   []byte
		opts   Options
		want   []string
		option string
		// maxAlloc bounds what reading allocates.
		maxAlloc uint64
	}{
		{"declares 1 TiB", withPickle(t, rawEntry{method: zip.Deflate, data: bomb, crc: crc, size: 1 << 40}), Options{},
			[]string{"the pickle is 1099511627776 bytes, more than the 67108864"}, "MaxPickleBytes", 1 << 20},
		{"declares more than MaxPickleBytes", withPickle(t, rawEntry{method: zip.Deflate, data: bomb, crc: crc, size: uint64(len(nones))}), Options{MaxPickleBytes: 1 << 20},
			[]string{"more than the 1048576"}, "MaxPickleBytes", 1 << 20},
		{"declares less than it inflates to", withPickle(t, rawEntry{method: zip.Deflate, data: bomb, crc: crc, size: 4096}), Options{},
			[]string{"ckpt/data.pkl"}, "", 1 << 20},
		{"builds too many values", withPickle(t, rawEntry{method: zip.Deflate, data: deflate(t, few), crc: crc32.ChecksumIEEE(few), size: uint64(len(few))}), Options{MaxValues: 1 << 16},
			[]string{"builds more than 65536 values"}, "MaxValues", 16 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = ReadBytes(c.file, "bomb.pt", c.opts) })
			wantError(t, c.name, err, append(c.want, "bomb.pt", "ckpt/data.pkl")...)
			var pe *Error
			if !errors.As(err, &pe) || pe.Option != c.option || (c.option != "" && !strings.Contains(pe.Hint, "Options."+c.option)) {
				t.Errorf("%v: want Option %q and its hint", err, c.option)
			}
			if n > c.maxAlloc {
				t.Errorf("reading allocated %d bytes, want at most %d", n, c.maxAlloc)
			}
		})
	}
	// The values a pickle builds are bounded even when nothing of them
	// is reachable from its result (the machine's stack): 2^20 empty
	// lists, then STOP on the last.
	lists := "\x80\x02" + strings.Repeat("]", 1<<20) + "."
	_, err := unpickle([]byte(lists), newAllowList(Options{MaxValues: 1 << 16}), fakeStorages())
	wantError(t, "empty lists", err, "builds more than 65536 values")
}
