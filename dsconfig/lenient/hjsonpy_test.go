package lenient

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// golden.json records what hjson-py 3.1.0 does with each case, read the way
// DeepSpeed reads a config path. testdata/hjsonpy/gen.py says how to
// regenerate it.
type golden struct {
	HjsonPy string       `json:"hjson_py"`
	Commit  string       `json:"commit"`
	Python  string       `json:"python"`
	Cases   []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name       string          `json:"name"`
	Input      *string         `json:"input"`
	InputB64   string          `json:"input_b64"`
	CorpusFile string          `json:"corpus_file"`
	OK         bool            `json:"ok"`
	Value      json.RawMessage `json:"value"`
	Error      string          `json:"error"`
}

func (c goldenCase) data(t *testing.T) []byte {
	t.Helper()
	switch {
	case c.Input != nil:
		return []byte(*c.Input)
	case c.InputB64 != "":
		b, err := base64.StdEncoding.DecodeString(c.InputB64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := os.ReadFile(filepath.Join(corpusDir, c.CorpusFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hjsonDivergences are inputs hjson-py reads into an object and ParseHjson
// rejects on purpose. Everything else must agree.
var hjsonDivergences = map[string]string{
	"str/lone_high_surrogate": "a lone surrogate cannot be encoded as UTF-8; hjson-py keeps it in a Python str",
	"str/lone_low_surrogate":  "as above",
	"str/high_then_non_low":   "as above",
	"str/unicode_spaces":      `hjson-py parses \uXXXX with Python's int(x, 16), which allows spaces; JSON does not`,
	"str/unicode_plus":        `as above, with a sign`,
	"num/int_400_digits":      "Python ints are unbounded; we reject numbers beyond float64 range",
	"num/arabic_digit":        "Python's \\d and int() accept any Unicode digit; we reject them with a message",
	"depth/401":               "our nesting limit (400) stays below hjson-py's (about 490)",
	"key/form_feed":           "we reject control characters in unquoted keys",
}

// parseRejects are inputs ParseHjson reads without any quoteless value that
// Parse still rejects.
var parseRejects = map[string]string{
	"root/empty":            "empty config",
	"root/white_space_only": "empty config",
	"comment/only":          "empty config",
	"key/comment_glued":     "unquoted key containing a comment marker",
	"key/hash_inside":       "unquoted key containing a comment marker",
	"key/quote_inside":      "unquoted key containing a quote",
	"key/nbsp":              "unquoted key containing unusual white space",
}

const corpusDir = "../testdata/ds_configs"

func loadGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/hjsonpy/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.HjsonPy != "3.1.0" || len(g.Cases) < 200 {
		t.Fatalf("golden.json is for hjson-py %s with %d cases; regenerate it with testdata/hjsonpy/gen.py", g.HjsonPy, len(g.Cases))
	}
	return g
}

// TestHjsonPyConformance runs every golden case through ParseHjson and
// Parse and compares with hjson-py's result, including Python's int/float
// split of numbers.
func TestHjsonPyConformance(t *testing.T) {
	g := loadGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			data := c.data(t)
			want := c.OK
			var wantTree any
			if c.OK && len(c.Value) > 0 && string(c.Value) != "null" {
				var raw any
				if err := json.Unmarshal(c.Value, &raw); err != nil {
					t.Fatal(err)
				}
				wantTree = normalizePy(raw)
				if raw.([]any)[0] != "dict" {
					want = false // DeepSpeed needs an object at the top level
				}
			}
			if _, ok := hjsonDivergences[c.Name]; ok {
				want = false
			}
			v, err := ParseHjson("case", data)
			if (err == nil) != want {
				t.Fatalf("ParseHjson: err = %v, want success %v (hjson-py: ok=%v %s)", err, want, c.OK, c.Error)
			}
			if err != nil {
				checkError(t, err, data)
				if _, perr := Parse("case", data); perr == nil {
					t.Errorf("Parse accepted what ParseHjson rejects")
				}
				return
			}
			if wantTree != nil {
				if diff := treeDiff(wantTree, pyTyped(v)); diff != "" {
					t.Errorf("ParseHjson tree differs from hjson-py (-hjson-py +ours):\n%s", diff)
				}
			}
			pv, perr := Parse("case", data)
			_, reject := parseRejects[c.Name]
			if hasQuoteless(v) || reject {
				if perr == nil {
					t.Fatalf("Parse accepted input that hjson-py reads with quoteless strings or that Parse must reject")
				}
				checkError(t, perr, data)
				return
			}
			if perr != nil {
				t.Fatalf("Parse: %v", perr)
			}
			if diff := treeDiff(pyTyped(v), pyTyped(pv)); diff != "" {
				t.Errorf("Parse and ParseHjson differ:\n%s", diff)
			}
		})
	}
}

// treeDiff is cmp.Diff, with a reflect.DeepEqual fast path: cmp's slice
// diff compares nested elements repeatedly, which explodes on the
// 400-deep cases.
func treeDiff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return cmp.Diff(want, got)
}

func hasQuoteless(v *Value) bool {
	switch v.Kind {
	case String:
		return v.Quoteless
	case Array:
		for _, e := range v.Elems {
			if hasQuoteless(e) {
				return true
			}
		}
	case Object:
		for _, m := range v.Members {
			if hasQuoteless(m.Value) {
				return true
			}
		}
	}
	return false
}

// normalizePy turns the ["float", repr] leaves of a golden tree into
// float64 so they compare by value.
func normalizePy(x any) any {
	n := x.([]any)
	switch n[0] {
	case "float":
		f, err := strconv.ParseFloat(n[1].(string), 64)
		if err != nil {
			panic(err)
		}
		return []any{"float", f}
	case "list":
		out := []any{}
		for _, e := range n[1].([]any) {
			out = append(out, normalizePy(e))
		}
		return []any{"list", out}
	case "dict":
		out := []any{}
		for _, kv := range n[1].([]any) {
			p := kv.([]any)
			out = append(out, []any{p[0], normalizePy(p[1])})
		}
		return []any{"dict", out}
	}
	return n
}

// pyTyped writes v the way gen.py writes hjson-py's result. Numbers follow
// hjson-py's scantfnns: a literal without fraction or exponent is a Python
// int; otherwise float(literal), turned into an int when it is whole and
// below 1e10 in magnitude.
func pyTyped(v *Value) any {
	switch v.Kind {
	case Null:
		return []any{"null"}
	case Bool:
		return []any{"bool", v.Bool}
	case Number:
		if !strings.ContainsAny(v.Num, ".eE") {
			i, ok := new(big.Int).SetString(v.Num, 10)
			if !ok {
				panic(v.Num)
			}
			return []any{"int", i.String()}
		}
		f, err := strconv.ParseFloat(v.Num, 64)
		if err != nil {
			panic(err)
		}
		if f == math.Trunc(f) && math.Abs(f) < 1e10 {
			return []any{"int", strconv.FormatInt(int64(f), 10)}
		}
		return []any{"float", f}
	case String:
		return []any{"str", v.Str}
	case Array:
		out := []any{}
		for _, e := range v.Elems {
			out = append(out, pyTyped(e))
		}
		return []any{"list", out}
	case Object:
		out := []any{}
		for _, m := range v.Members {
			out = append(out, []any{m.Key, pyTyped(m.Value)})
		}
		return []any{"dict", out}
	}
	panic(v.Kind)
}

// checkError asserts the error contract: an *Error positioned inside the
// input (the end of input included), with a message.
func checkError(t *testing.T, err error, data []byte) {
	t.Helper()
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if e.Pos.Offset < 0 || e.Pos.Offset > len(data) || e.Pos.Line < 1 || e.Pos.Col < 1 || e.Msg == "" {
		t.Fatalf("error %q has position %+v outside the %d-byte input, or no message", e, e.Pos, len(data))
	}
	lines := 1 + strings.Count(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") + strings.Count(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r")
	if e.Pos.Line > lines {
		t.Fatalf("error %q is on line %d of a %d-line input", e, e.Pos.Line, lines)
	}
}
