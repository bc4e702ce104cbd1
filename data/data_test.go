package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGlobalBatchIndependentOfWorld(t *testing.T) {
	c := ByteCorpus("t", []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz", 20)))
	const B, T = 2, 5
	collect := func(world, gas int) [][]int32 {
		ld, err := NewLoader(c, Layout{B: B, T: T, GAS: gas, World: world})
		if err != nil {
			t.Fatal(err)
		}
		var out [][]int32
		for micro := 0; micro < gas; micro++ {
			for r := 0; r < world; r++ {
				in, tg := make([]int32, B*T), make([]int32, B*T)
				ld.Micro(1, micro, r, in, tg)
				out = append(out, in)
				if in[1] != tg[0] {
					t.Fatalf("targets are not shifted inputs")
				}
			}
		}
		return out
	}
	// 4 micro-batches per step either way: 1 rank × GAS 4 and 2 ranks × GAS 2
	// cover the same samples, in the order mb = micro*world + rank.
	if d := cmp.Diff(collect(1, 4), collect(2, 2)); d != "" {
		t.Error(d)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "e.txt")
	os.WriteFile(empty, nil, 0o644)
	odd := filepath.Join(dir, "odd.bin")
	os.WriteFile(odd, []byte{1, 2, 3}, 0o644)
	for path, want := range map[string]string{empty: "empty", odd: "uint16", filepath.Join(dir, "none"): "no such file"} {
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if _, err := NewLoader(ByteCorpus("x", []byte("abc")), Layout{1, 8, 1, 1}); err == nil {
		t.Error("short corpus accepted")
	}
	bin := filepath.Join(dir, "ok.bin")
	os.WriteFile(bin, []byte{1, 0, 0xff, 0x01}, 0o644)
	c, err := Load(bin)
	if err != nil || c.Len() != 2 || c.Vocab != 512 {
		t.Errorf("bin: %v %+v", err, c)
	}
	if TinyShakespeare().Len() < 1000000 {
		t.Error("embedded corpus missing")
	}
}
