package ptfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Both fuzz targets check the same property: reading never panics, and
// whatever reads also writes, and reads back identically. The expansion
// limit is lowered so that each input stays fast to check.
var fuzzOpts = Options{DeepSpeed: true, MaxValues: 1 << 16}

// FuzzRead fuzzes whole files (zip structure, CRCs, records), seeded with
// the real DeepSpeed files in testdata and a Go-written file.
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.pt")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(small(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ReadBytes(b, "fuzz.pt", fuzzOpts)
		if err != nil {
			return
		}
		roundTrip(t, v)
	})
}

// FuzzPickle fuzzes data.pkl alone (whole-file fuzzing rarely gets past the
// CRC), seeded with the DeepSpeed files' pickles, a protocol 4 pickle from
// torch.save and a Go-written one.
func FuzzPickle(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.pt")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(entriesOf(f, b)[0].data)
	}
	p4, err := os.ReadFile("testdata/torch_p4_data.pkl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p4)
	pkl, _, err := marshal(everything(false))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pkl)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := unpickle(b, newAllowList(fuzzOpts), fakeStorages())
		if err != nil {
			return
		}
		roundTrip(t, v)
	})
}

func roundTrip(t *testing.T, v any) {
	want := describe(v)
	var buf bytes.Buffer
	if err := Encode(&buf, "fuzz", v); err != nil {
		t.Fatalf("read but cannot write: %v", err)
	}
	back, err := ReadBytes(buf.Bytes(), "rewritten.pt", dsOpts)
	if err != nil {
		t.Fatalf("cannot read what was written: %v", err)
	}
	if got := describe(back); got != want {
		t.Fatalf("round trip differs %s", firstDiff(want, got))
	}
}
