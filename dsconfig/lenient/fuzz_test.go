package lenient

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks, for any input: no panic; errors are *Error positioned
// inside the input; Parse accepts only what ParseHjson accepts, with the
// same tree; every value's position agrees with an independent line count;
// MarshalJSON writes JSON that encoding/json reads as Interface does and
// that Parse reads back to an equal tree; ParseWithDeviations lists no
// deviation exactly when encoding/json (an independent JSON reader) accepts
// the input, and lists them in file order at their positions.
//
// Seeds: every corpus config and every golden hjson-py case.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	confs, _ := filepath.Glob(filepath.Join(corpusDir, "*.conf"))
	for _, name := range append(files, confs...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	if b, err := os.ReadFile("testdata/hjsonpy/golden.json"); err == nil {
		var g golden
		if err := json.Unmarshal(b, &g); err != nil {
			f.Fatal(err)
		}
		for _, c := range g.Cases {
			switch {
			case c.Input != nil:
				f.Add([]byte(*c.Input))
			case c.InputB64 != "":
				d, _ := base64.StdEncoding.DecodeString(c.InputB64)
				f.Add(d)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hv, herr := ParseHjson("f", data)
		v, devs, err := ParseWithDeviations("f", data)
		if herr != nil {
			checkError(t, herr, data)
		}
		if err != nil {
			checkError(t, err, data)
			return
		}
		if herr != nil {
			t.Fatalf("Parse accepted what ParseHjson rejects: %v", herr)
		}
		if !reflect.DeepEqual(pyTyped(v), pyTyped(hv)) {
			t.Fatalf("Parse and ParseHjson trees differ")
		}
		checkPositions(t, data, v)
		if valid := json.Valid(data); valid != (len(devs) == 0) {
			t.Fatalf("encoding/json valid=%v, but deviations %v", valid, devs)
		}
		for i, d := range devs {
			if want := refPos(data, d.Pos.Offset); d.Pos != want {
				t.Fatalf("%v: Pos %+v, want %+v", d.Kind, d.Pos, want)
			}
			if i > 0 && d.Pos.Offset < devs[i-1].Pos.Offset {
				t.Fatalf("deviations out of order: %v", devs)
			}
		}
		out, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var decoded any
		if err := json.Unmarshal(out, &decoded); err != nil {
			t.Fatalf("MarshalJSON wrote invalid JSON %q: %v", out, err)
		}
		if !reflect.DeepEqual(decoded, floatNumbers(v.Interface())) {
			t.Fatalf("encoding/json reads %q differently from Interface", out)
		}
		v2, err := Parse("f", out)
		if err != nil {
			t.Fatalf("MarshalJSON output %q does not parse: %v", out, err)
		}
		if !reflect.DeepEqual(pyTyped(v), pyTyped(v2)) {
			t.Fatalf("round trip through %q changed the tree", out)
		}
		if out2, _ := v2.MarshalJSON(); !bytes.Equal(out, out2) {
			t.Fatalf("MarshalJSON is not stable: %q then %q", out, out2)
		}
	})
}

// checkPositions compares every value's and key's Pos with refPos.
func checkPositions(t *testing.T, data []byte, v *Value) {
	t.Helper()
	if want := refPos(data, v.Pos.Offset); v.Pos != want {
		t.Fatalf("%v value at offset %d: Pos %+v, want %+v", v.Kind, v.Pos.Offset, v.Pos, want)
	}
	for _, m := range v.Members {
		if want := refPos(data, m.KeyPos.Offset); m.KeyPos != want {
			t.Fatalf("key %q: Pos %+v, want %+v", m.Key, m.KeyPos, want)
		}
		checkPositions(t, data, m.Value)
	}
	for _, e := range v.Elems {
		checkPositions(t, data, e)
	}
}

// refPos is a slow, independent position count: normalise line breaks as
// Python's text mode does, then count lines and characters.
func refPos(data []byte, off int) Pos {
	s := string(data[:off])
	s = strings.TrimPrefix(s, "\uFEFF")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	line := 1 + strings.Count(s, "\n")
	col := 1 + utf8.RuneCountInString(s[strings.LastIndexByte(s, '\n')+1:])
	return Pos{Offset: off, Line: line, Col: col}
}
