package lenient

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Tree builders for expected values. Expected trees are written from the
// Hjson rules (hjson-py 3.1.0's decoder.py), never copied from output.
func obj(ms ...Member) *Value { return &Value{Kind: Object, Members: ms} }
func arr(es ...*Value) *Value { return &Value{Kind: Array, Elems: es} }
func num(s string) *Value     { return &Value{Kind: Number, Num: s} }
func str(s string) *Value     { return &Value{Kind: String, Str: s} }
func boolean(b bool) *Value   { return &Value{Kind: Bool, Bool: b} }
func null() *Value            { return &Value{Kind: Null} }
func bareStr(s string) *Value { return &Value{Kind: String, Str: s, Quoteless: true} }

func m(k string, v *Value) Member       { return Member{Key: k, Value: v} }
func bareKey(k string, v *Value) Member { return Member{Key: k, KeyQuoteless: true, Value: v} }

var ignorePos = cmp.Options{
	cmpopts.IgnoreFields(Value{}, "Pos"),
	cmpopts.IgnoreFields(Member{}, "KeyPos"),
	cmpopts.EquateEmpty(),
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name, in string
		want     *Value
	}{
		{"strict JSON", `{"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 0}, "x": null, "l": [1, "a"]}`,
			obj(m("train_batch_size", num("8")), m("fp16", obj(m("enabled", boolean(true)), m("loss_scale", num("0")))),
				m("x", null()), m("l", arr(num("1"), str("a"))))},
		{"hash comment", "{\"a\": 1 # one\n}", obj(m("a", num("1")))},
		{"slash comment", "// head\n{\"a\": 1 // one\n}", obj(m("a", num("1")))},
		{"block comment over lines", "{\"a\": /* one\n two */ 1}", obj(m("a", num("1")))},
		{"block comment in array", "{\"a\": [1, /* two */ 2, /*\n*/ 3]}", obj(m("a", arr(num("1"), num("2"), num("3"))))},
		{"comment ends a number", "{\"a\": 5e8# c\n}", obj(m("a", num("5e8")))},
		{"comment after root", `{"a": 1} // end`, obj(m("a", num("1")))},
		{"BOM", "\uFEFF{\"a\": 1}", obj(m("a", num("1")))},
		{"CRLF", "{\r\n\"a\": 1,\r\n\"b\": 2\r\n}\r\n", obj(m("a", num("1")), m("b", num("2")))},
		{"CR only", "{\r\"a\": 1\r\"b\": true\r}", obj(m("a", num("1")), m("b", boolean(true)))},
		{"trailing commas", `{"a": [1, 2,], "b": {"c": 3,},}`, obj(m("a", arr(num("1"), num("2"))), m("b", obj(m("c", num("3")))))},
		{"newline-separated members", "{\n\"a\": 1\n\"b\": [\n1\n2\n]\n}", obj(m("a", num("1")), m("b", arr(num("1"), num("2"))))},
		{"no comma after strings", `{"a": "x" "b": ["y" "z"]}`, obj(m("a", str("x")), m("b", arr(str("y"), str("z"))))},
		{"quoteless keys", "{stage: 3, offload_param  : {device: \"cpu\"}}",
			obj(bareKey("stage", num("3")), bareKey("offload_param", obj(bareKey("device", str("cpu")))))},
		{"omitted root braces", "train_batch_size: 8\n\"fp16\": {\"enabled\": false}\n",
			obj(bareKey("train_batch_size", num("8")), m("fp16", obj(m("enabled", boolean(false)))))},
		{"single quotes", `{'a': 'x"y', "b": "it's"}`, obj(m("a", str(`x"y`)), m("b", str("it's")))},
		{"escapes", `{"a": "\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\'"}`, obj(m("a", str("\"\\/\b\f\n\r\té\U0001F600'")))},
		{"multiline string", "{\n  a: '''\n    x\n      y\n    '''\n}\n", obj(bareKey("a", str("x\n y")))},
		{"multiline string CRLF", "{\r\n  a: '''\r\n    x\r\n    '''\r\n}\r\n", obj(bareKey("a", str("x")))},
		{"numbers", `{"a": 5e8, "b": 1e14, "c": -1, "d": 0.9, "e": -0, "f": 1E-5, "g": 2.0}`,
			obj(m("a", num("5e8")), m("b", num("1e14")), m("c", num("-1")), m("d", num("0.9")), m("e", num("-0")),
				m("f", num("1E-5")), m("g", num("2.0")))},
		{"number then spaces", "{\"a\": 5 , \"b\": 6\t}", obj(m("a", num("5")), m("b", num("6")))},
		{"literal then odd white space", "{\"a\": true\u00a0,\n\"b\": null\v}", obj(m("a", boolean(true)), m("b", null()))},
		{"tiny number", `{"a": 1e-400}`, obj(m("a", num("1e-400")))},
		{"empty containers", `{"a": {}, "b": [], "c": ""}`, obj(m("a", obj()), m("b", arr()), m("c", str("")))},
		{"URL string", `{"a": "http://x/y#z"}`, obj(m("a", str("http://x/y#z")))},
		{"same key in sibling objects", `{"x": {"a": 1}, "y": {"a": 2}}`, obj(m("x", obj(m("a", num("1")))), m("y", obj(m("a", num("2")))))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("ds.json", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, ignorePos); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseHjson(t *testing.T) {
	tests := []struct {
		name, in string
		want     *Value
	}{
		{"template", "{\n\"stage\": ${zero_stage},\n\"b\": 1}", obj(m("stage", bareStr("${zero_stage},")), m("b", num("1")))},
		{"bare word", "{a: auto\n}", obj(bareKey("a", bareStr("auto")))},
		{"not numbers", "a: .5\nb: +1\nc: 0x10\nd: NaN\ne: 1.\n",
			obj(bareKey("a", bareStr(".5")), bareKey("b", bareStr("+1")), bareKey("c", bareStr("0x10")),
				bareKey("d", bareStr("NaN")), bareKey("e", bareStr("1.")))},
		{"value swallows the line", "{\"a\": x, \"b\": 1\n}", obj(m("a", bareStr(`x, "b": 1`)))},
		{"comment inside a quoteless string", "a: abc#c\nb: http://x\n", obj(bareKey("a", bareStr("abc#c")), bareKey("b", bareStr("http://x")))},
		{"empty input is an empty object", "# nothing\n", obj()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHjson("ds.json", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, ignorePos); diff != "" {
				t.Errorf("ParseHjson(%q) (-want +got):\n%s", tt.in, diff)
			}
			if _, err := Parse("ds.json", []byte(tt.in)); err == nil {
				t.Errorf("Parse(%q) accepted what DeepSpeed reads as a quoteless string or empty object", tt.in)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 401) + "1" + strings.Repeat("}", 401)
	tests := []struct{ name, in, want string }{
		{"duplicate at depth", "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"offload_param\": {\"device\": \"cpu\"},\n    \"stage\": 3\n  }\n}",
			`ds.json:5:5: duplicate key "stage" in "zero_optimization" (first at line 3); DeepSpeed rejects duplicate keys: keep one`},
		{"duplicate in array element", `{"a": [{}, {"x": 1, "x": 2}]}`,
			`ds.json:1:21: duplicate key "x" in "a[1]" (first at 1:13); DeepSpeed rejects duplicate keys: keep one`},
		{"duplicate top level CRLF", "{\r\n\"a\": 1,\r\n\"a\": 2\r\n}",
			`ds.json:3:1: duplicate key "a" in the top-level object (first at line 2); DeepSpeed rejects duplicate keys: keep one`},
		{"duplicate by escape", `{"a": 1, "\u0061": 2}`,
			`ds.json:1:10: duplicate key "a" in the top-level object (first at 1:2); DeepSpeed rejects duplicate keys: keep one`},
		{"template", "{\n  \"zero_optimization\": {\n    \"stage\": ${zero_stage},\n  }\n}",
			`ds.json:3:14: unquoted value ${zero_stage}, at zero_optimization.stage looks like an unfilled template; DeepSpeed's Hjson reader would take it as the string "${zero_stage}," and fail later; fill in the value or quote it`},
		{"bare word", `{"fp16": {"enabled": auto}}`,
			`ds.json:1:22: unquoted value auto}} at fp16.enabled is a bare word; DeepSpeed's Hjson reader would take it as the string "auto}}"; quote it ("auto") if a string is meant`},
		{"bare word with comma", "{\"optimizer\": {\"type\": AdamW,\n\"params\": {}}}",
			`ds.json:1:24: unquoted value AdamW, at optimizer.type is a bare word; DeepSpeed's Hjson reader would take it as the string "AdamW,"; quote it ("AdamW") if a string is meant`},
		{"Python True", "{\"a\": True\n}",
			`ds.json:1:7: unquoted value True at a is not a JSON literal (they are lowercase: true, false, null); DeepSpeed's Hjson reader would take it as the string "True"; write true`},
		{"Python None", "{\"a\": None,\n}",
			`ds.json:1:7: unquoted value None, at a is not a JSON literal (they are lowercase: true, false, null); DeepSpeed's Hjson reader would take it as the string "None,"; write null`},
		{"leading dot", `{"lr": .5}`,
			`ds.json:1:8: unquoted value .5} at lr is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string ".5}"; write 0.5`},
		{"leading plus", "{\"a\": +1\n}", `ds.json:1:7: unquoted value +1 at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "+1"; write 1`},
		{"hex", "{\"a\": 0x10\n}", `ds.json:1:7: unquoted value 0x10 at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "0x10"; write 16`},
		{"underscore", "{\"a\": 1_000\n}", `ds.json:1:7: unquoted value 1_000 at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "1_000"; write 1000`},
		{"leading zero", "{\"a\": 01\n}", `ds.json:1:7: unquoted value 01 at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "01"; write 1`},
		{"trailing dot", "{\"a\": 1.\n}", `ds.json:1:7: unquoted value 1. at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "1."; write 1.0`},
		{"unit suffix", "{\"a\": 5GB\n}", `ds.json:1:7: unquoted value 5GB at a is not a valid JSON number; DeepSpeed's Hjson reader would take it as the string "5GB"; write a plain decimal number such as 0.5 or 5e8, or quote it if a string is meant`},
		{"NaN", "{\"a\": NaN\n}", `ds.json:1:7: unquoted value NaN at a is not a JSON number; DeepSpeed's Hjson reader would take it as the string "NaN"; JSON has no NaN or Infinity: write a finite number`},
		{"-Infinity", "{\"a\": -Infinity\n}", `ds.json:1:7: unquoted value -Infinity at a is not a JSON number; DeepSpeed's Hjson reader would take it as the string "-Infinity"; JSON has no NaN or Infinity: write a finite number`},
		{"missing comma swallowed", `{"a": 1 "b": 2}`,
			`ds.json:1:7: unquoted value 1 "b": 2} at a: Hjson reads an unquoted value to the end of the line, so DeepSpeed's Hjson reader would take it as the string "1 \"b\": 2}"; quote strings; if JSON was meant, look for a missing quote or comma`},
		{"value in array", `{"a": [1, x]}`,
			`ds.json:1:11: unquoted value x]} at a[1] is a bare word; DeepSpeed's Hjson reader would take it as the string "x]}"; quote it ("x") if a string is meant`},
		{"odd white space before literal", "{\"a\": \u00a0true\n}",
			`ds.json:1:7: unquoted value true at a is next to unusual white space, so DeepSpeed's Hjson reader would take it as the string "true"; replace it with plain spaces`},
		{"1e400", `{"a": 1e400}`, `ds.json:1:7: number 1e400 is out of range for a; it overflows a 64-bit float, and DeepSpeed's Hjson reader fails on it too (OverflowError)`},
		{"400-digit integer", `{"a": ` + strings.Repeat("9", 400) + `}`, `ds.json:1:7: number ` + strings.Repeat("9", 60) + `… is out of range for a; it does not fit in a 64-bit float`},
		{"non-ASCII digit", "{\"a\": 1\u0663}", "ds.json:1:7: number 1\u0663 for a has non-ASCII digits (DeepSpeed's Hjson reader would accept them); write the number with the digits 0-9"},
		{"unterminated string", `{"a": "x`, `ds.json:1:7: unterminated string: end of input before the closing "`},
		{"string across lines", "{\"a\": \"x\n\"}", `ds.json:1:7: unterminated string: the line ends before the closing "; a string cannot span lines: close the quote, or write a line break as \n`},
		{"tab in string", "{\"a\": \"x\ty\"}", `ds.json:1:9: control character U+0009 in a string; write a tab as \t`},
		{"invalid escape", `{"a": "C:\data"}`, `ds.json:1:10: invalid escape \d in a string; JSON's escapes are \" \\ \/ \b \f \n \r \t \uXXXX; write a backslash (say, in a Windows path) as \\`},
		{"short unicode escape", `{"a": "\u12"}`, `ds.json:1:8: invalid \u escape: expected four hex digits after \u`},
		{"lone surrogate", `{"a": "\ud800x"}`, `ds.json:1:8: unpaired surrogate \uD800 in a string; write the character itself, or a complete surrogate pair`},
		{"unterminated block comment", `{"a": 1 /* x`, `ds.json:1:9: unterminated /* comment; close it with */ (DeepSpeed's Hjson reader fails on it too)`},
		{"unterminated multiline", "{\na: '''x\n", `ds.json:2:4: unterminated ''' string; close it with '''`},
		{"empty", "", `ds.json:1:1: empty config: expected a JSON object; DeepSpeed would read it as {} and then fail: a config needs at least train_batch_size or train_micro_batch_size_per_gpu`},
		{"comments only", "  \n# c\n", `ds.json:3:1: empty config: expected a JSON object; DeepSpeed would read it as {} and then fail: a config needs at least train_batch_size or train_micro_batch_size_per_gpu`},
		{"top-level array", "[1]", `ds.json:1:1: the config is an array; expected a JSON object; DeepSpeed needs a JSON object such as {"train_batch_size": 8}`},
		{"top-level number", " 5", `ds.json:1:2: the config is the number 5; expected a JSON object; DeepSpeed needs a JSON object such as {"train_batch_size": 8}`},
		{"top-level string", `"abc"`, `ds.json:1:1: the config is the string "abc"; expected a JSON object; DeepSpeed needs a JSON object such as {"train_batch_size": 8}`},
		{"invalid UTF-8", "{\"a\": \"\xff\"}", `ds.json:1:8: invalid UTF-8 byte 0xFF; DeepSpeed opens the file as UTF-8 text and fails to decode it: save it as UTF-8`},
		{"too deep", deep, `ds.json:1:2001: objects and arrays nest deeper than 400 levels; DeepSpeed's Hjson reader is recursive and fails near 490 levels`},
		{"BOM takes no column", "\uFEFF{\"a\": x}", `ds.json:1:7: unquoted value x} at a is a bare word; DeepSpeed's Hjson reader would take it as the string "x}"; quote it ("x") if a string is meant`},
		{"columns count characters", "{\"é\": [1,,]}", `ds.json:1:10: found ',' where a value was expected for é[1]; remove the extra comma, or write the missing value`},
		{"CR ends lines", "{\r\"a\": 1\r\"b\": x\r}", `ds.json:3:6: unquoted value x at b is a bare word; DeepSpeed's Hjson reader would take it as the string "x"; quote it ("x") if a string is meant`},
		{"unclosed root", `{"a": {"b": 1}`, `ds.json:1:15: unexpected end of input: the object opened at line 1, column 1 is not closed; add the missing '}'`},
		{"unclosed nested", `{"a": {"b": 1`, `ds.json:1:14: unexpected end of input: the object opened at line 1, column 7 (a) is not closed; add the missing '}'`},
		{"unclosed array", "{\"a\": [1,\n", `ds.json:2:1: unexpected end of input: the array opened at line 1, column 7 (a) is not closed; add the missing ']'`},
		{"mismatched bracket", `{"a": [1}`, `ds.json:1:9: found '}' but the innermost open bracket is '[' at line 1, column 7; close it with ']'`},
		{"missing value", `{"a": }`, `ds.json:1:7: found '}' where a value was expected for a; write the value, or remove the key`},
		{"double comma", `{"a": 1,,}`, `ds.json:1:9: found ',' where a key was expected; remove the extra comma`},
		{"missing colon", `{"a" 1}`, `ds.json:1:6: expected ':' after key "a", found '1'; write key: value`},
		{"extra data", `{"a":1}}`, `ds.json:1:8: unexpected '}' after the end of the top-level object; is there an extra '}' or a second object?`},
		{"lost opening quote on key", `{a": 1}`, `ds.json:1:2: unquoted key a" contains a quote; is an opening quote missing? quote the whole key`},
		{"comment glued to key", `{a#b: 1}`, `ds.json:1:2: unquoted key a#b contains a comment marker; Hjson reads it as part of the key, not as a comment: quote the key or move the comment`},
		{"space in key", `{a b: 1}`, `ds.json:1:2: a is followed by white space and more text before ':'; an unquoted key cannot contain white space: quote the key, or remove the stray text`},
		{"stray word", "{\n  foo\n  \"a\": 1\n}", `ds.json:2:3: foo is followed by white space and more text before ':'; an unquoted key cannot contain white space: quote the key, or remove the stray text`},
		{"empty bare key", `{: 1}`, `ds.json:1:2: found ':' where a key was expected; an empty key must be quoted: "": value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Parse("ds.json", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error %s", tt.in, v, tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse(%q) error\n got: %s\nwant: %s", tt.in, got, tt.want)
			}
			checkError(t, err, []byte(tt.in))
		})
	}
}

func TestPositions(t *testing.T) {
	// Line 1: BOM '{'; line 2 ends with CRLF; line 3 starts with a tab and
	// ends with a lone CR; 'é' is two bytes but one column.
	in := "\uFEFF{\r\n  \"a\": 1,\r\n\t\"é\": \"x\", \"b\": [true,\r null]\r\n}"
	v, err := Parse("ds.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	at := func(substr string, nth int) int {
		off := -1
		for i := 0; i <= nth; i++ {
			off += 1 + strings.Index(in[off+1:], substr)
		}
		return off
	}
	a, _ := v.Get("a")
	e, _ := v.Get("é")
	b, _ := v.Get("b")
	got := []Pos{v.Pos, v.Members[0].KeyPos, a.Pos, v.Members[1].KeyPos, e.Pos, v.Members[2].KeyPos, b.Pos, b.Elems[0].Pos, b.Elems[1].Pos}
	want := []Pos{
		{at("{", 0), 1, 1},
		{at(`"a"`, 0), 2, 3}, {at("1", 0), 2, 8},
		{at(`"é"`, 0), 3, 2}, {at(`"x"`, 0), 3, 7},
		{at(`"b"`, 0), 3, 12}, {at("[", 0), 3, 17}, {at("true", 0), 3, 18},
		{at("null", 0), 4, 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("positions (-want +got):\n%s", diff)
	}
	if s := b.Elems[1].Pos.String(); s != "4:2" {
		t.Errorf("Pos.String() = %q, want 4:2", s)
	}
}

func TestNumbers(t *testing.T) {
	tests := []struct {
		lit      string
		i        int64
		iOK      bool
		f        float64
		fOK      bool
		integral bool
	}{
		{"5e8", 500000000, true, 5e8, true, true},
		{"1e14", 100000000000000, true, 1e14, true, true},
		{"-1", -1, true, -1, true, true},
		{"0.9", 0, false, 0.9, true, false},
		{"2.0", 2, true, 2, true, true},
		{"2.5", 0, false, 2.5, true, false},
		{"1.5e1", 15, true, 15, true, true},
		{"150e-1", 15, true, 15, true, true},
		{"123.4560e3", 123456, true, 123456, true, true},
		{"1e-5", 0, false, 1e-5, true, false},
		{"-0", 0, true, 0, true, true},
		{"0.000", 0, true, 0, true, true},
		{"0e99999999999", 0, true, 0, true, true},
		{"9223372036854775807", 9223372036854775807, true, 9223372036854775807, true, true},
		{"9223372036854775808", 0, false, 9223372036854775808, true, true},
		{"-9223372036854775808", -9223372036854775808, true, -9223372036854775808, true, true},
		{"-9223372036854775809", 0, false, -9223372036854775809, true, true},
		{"9.223372036854775807e18", 9223372036854775807, true, 9223372036854775807, true, true},
		{"1e18", 1000000000000000000, true, 1e18, true, true},
		{"1e19", 0, false, 1e19, true, true},
		{"1e-400", 0, false, 0, true, false},
		{"1e400", 0, false, 0, false, true},
		{"1e99999999999999999999", 0, false, 0, false, true},
		{"1e-99999999999999999999", 0, false, 0, true, false},
		{"5", 5, true, 5, true, true},
		{"x", 0, false, 0, false, false}, // not a number literal
	}
	for _, tt := range tests {
		v := num(tt.lit)
		i, iOK := v.Int64()
		f, fOK := v.Float64()
		if i != tt.i || iOK != tt.iOK || f != tt.f || fOK != tt.fOK || v.IsIntegral() != tt.integral {
			t.Errorf("%s: Int64 = %d, %v; Float64 = %v, %v; IsIntegral = %v; want %d, %v; %v, %v; %v",
				tt.lit, i, iOK, f, fOK, v.IsIntegral(), tt.i, tt.iOK, tt.f, tt.fOK, tt.integral)
		}
	}
	if _, ok := str("5").Int64(); ok {
		t.Error(`a String "5" converted with Int64`)
	}
}

func TestValueHelpers(t *testing.T) {
	v, err := Parse("ds.json", []byte(`{"a": 5e8, "b": 0.5, "c": [true, null, "s"], "d": {}, "e": 1e19}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": int64(500000000), "b": 0.5, "c": []any{true, nil, "s"}, "d": map[string]any{}, "e": 1e19}
	if diff := cmp.Diff(want, v.Interface()); diff != "" {
		t.Errorf("Interface (-want +got):\n%s", diff)
	}
	if c, ok := v.Get("c"); !ok || c.Kind != Array || len(c.Elems) != 3 {
		t.Errorf("Get(c) = %v, %v", c, ok)
	}
	if _, ok := v.Get("zz"); ok {
		t.Error("Get found a missing key")
	}
	if _, ok := num("1").Get("a"); ok {
		t.Error("Get on a number succeeded")
	}
	kinds := []Kind{Null, Bool, Number, String, Array, Object, Kind(9)}
	var names []string
	for _, k := range kinds {
		names = append(names, k.String())
	}
	if got := strings.Join(names, " "); got != "null bool number string array object Kind(9)" {
		t.Errorf("Kind names: %s", got)
	}
	e := &Error{Pos: Pos{Line: 2, Col: 3}, Msg: "m"}
	if e.Error() != "2:3: m" {
		t.Errorf("Error without file or hint: %q", e.Error())
	}
}

func TestMarshalJSON(t *testing.T) {
	in := "# c\n{a: 5e8, 'b': 'x\"y\\u0001', c: [1, -0.5E+3,], d: {\"\": null}\ne: '''\n   m\n   n\n   '''\n\"f\\u00e9\": \"\\ud83d\\ude00\\t\"}"
	want := `{"a":5e8,"b":"x\"y\u0001","c":[1,-0.5E+3],"d":{"":null},"e":"m\nn","fé":"😀\t"}`
	v, err := Parse("ds.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("MarshalJSON\n got: %s\nwant: %s", got, want)
	}
	if _, err := (&Value{Kind: Number, Num: "+1"}).MarshalJSON(); err == nil {
		t.Error("MarshalJSON wrote a number literal that is not JSON")
	}
}

func TestDeviations(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // "kind line:col"
	}{
		{"JSON", `{"a": [1, 2], "b": {"c": "it's"}}`, nil},
		{"byte order mark", "\uFEFF{\"a\": 1}", []string{"a byte order mark 1:1"}},
		{"comments", "{\"a\": 1, // c\n /* d */ \"b\": 2 # e\n}", []string{"a comment 1:10", "a comment 2:2", "a comment 2:17"}},
		{"trailing commas", `{"a": [1, 2,], "b": 3,}`, []string{"a trailing comma 1:12", "a trailing comma 1:22"}},
		{"missing comma between members", "{\"a\": 1\n\"b\": \"x\" \"c\": 3}", []string{"a missing comma 1:8", "a missing comma 2:9"}},
		{"missing comma between elements", "{\"a\": [1\n2\n\"x\" \"y\"]}", []string{"a missing comma 1:9", "a missing comma 2:2", "a missing comma 3:4"}},
		{"unquoted key", `{a: 1}`, []string{"an unquoted key 1:2"}},
		{"single quotes", `{'a': "b\'c"}`, []string{"a single-quoted string 1:2", `the escape \' 1:9`}},
		{"multiline string", "{\"a\":\n '''x'''}", []string{"a ''' string 2:2"}},
		{"no braces", "a: 1\n\"b\": 2", []string{"an unquoted key 1:1", "a top-level object without braces 1:1", "a missing comma 1:5"}},
		{"odd white space", "{\"a\": true\u00a0}", []string{"white space that JSON does not allow 1:11"}},
	}
	for _, tt := range tests {
		_, devs, err := ParseWithDeviations("ds.json", []byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var got []string
		for _, d := range devs {
			got = append(got, fmt.Sprintf("%v %v", d.Kind, d.Pos))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if valid := json.Valid([]byte(tt.in)); valid != (len(devs) == 0) {
			t.Errorf("%s: encoding/json says valid=%v", tt.name, valid)
		}
	}
}

func TestBigInt(t *testing.T) {
	tests := []struct {
		lit  string
		want string // "" when not a whole number
	}{
		{"0", "0"}, {"-0", "0"}, {"5e8", "500000000"}, {"2.0", "2"}, {"-3", "-3"},
		{"9223372036854775808", "9223372036854775808"},
		{"1099511627776000000000000", "1099511627776000000000000"},
		{"1e30", "1" + strings.Repeat("0", 30)},
		{"1.5e1", "15"}, {"-12.50e1", "-125"},
		{"2.5", ""}, {"1e-5", ""}, {"1e400", ""},
	}
	for _, tt := range tests {
		n, ok := num(tt.lit).BigInt()
		switch {
		case tt.want == "" && ok:
			t.Errorf("%s: BigInt = %v, want not a whole number", tt.lit, n)
		case tt.want != "" && (!ok || n.String() != tt.want):
			t.Errorf("%s: BigInt = %v, %v; want %s", tt.lit, n, ok, tt.want)
		}
	}
	if _, ok := str("5").BigInt(); ok {
		t.Error(`a String "5" converted with BigInt`)
	}
}
