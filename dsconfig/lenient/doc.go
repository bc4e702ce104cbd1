// Package lenient reads DeepSpeed config files into a value tree that
// remembers where every key and value was written, so that every later
// error can say file:line:col.
//
// # Why lenient
//
// DeepSpeed does not read its config with a JSON parser. load_ds_config
// (deepspeed/runtime/tensor_parallel/init_utils.py, v0.19.5; the same call
// is in runtime/config.py) runs
//
//	hjson.load(open(path, "r"), object_pairs_hook=dict_raise_error_on_duplicate_keys)
//
// with hjson-py 3.1.0, which accepts a superset of JSON. Real configs use
// that superset (comments, trailing commas), so dszero must accept exactly
// what DeepSpeed accepts. But Hjson also turns many mistakes into strings
// without a word: `"stage": ${zero_stage},` becomes the string
// "${zero_stage},", `"lr": .5` the string ".5", `"enabled": True` the string
// "True". DeepSpeed then fails far away, or silently does something else.
// Parse reads the same syntax and reports those cases as errors, with the
// position and the string Hjson would have made.
//
// # What is accepted
//
// The rules are hjson-py's decoder (hjson/decoder.py at 3.1.0), checked
// case by case against hjson-py itself (testdata/hjsonpy):
//
//   - The input is UTF-8; a leading byte order mark is skipped. "\n",
//     "\r\n" and a lone "\r" end lines (Python's text mode turns all three
//     into "\n" before hjson-py sees the text).
//   - White space between tokens is ' ', '\t', '\n', '\r' only. Comments
//     may appear wherever that white space may: # and // run to the end of
//     the line, /* runs to the next */ and may span lines.
//   - Strings are "double" or 'single' quoted; either quote may appear
//     unescaped inside the other. Escapes are JSON's plus \'. Raw control
//     characters, line breaks included, are errors. A string opened with
//     three single quotes is a multiline string: no escapes, and the
//     indentation of the opening quotes is removed from each line.
//   - Commas between members and between elements are optional, and one
//     may precede the closing bracket: {"a": "x" "b": ["y" "z"],} has two
//     members. After an unquoted value, though, only a line end, a comma or
//     a closing bracket ends it (see quoteless values), so {"a": 1 "b": 2}
//     is not two members.
//   - Keys may be unquoted: everything up to the ':' except {}[], and white
//     space (allowed only just before the ':'). Member.KeyQuoteless marks
//     them so callers may warn: strict JSON readers reject such files.
//   - The braces of the top-level object may be omitted. The top level must
//     be an object: DeepSpeed indexes it as a dict.
//   - Duplicate keys in any object are an error, as DeepSpeed's
//     object_pairs_hook makes them.
//
// # Quoteless values and numbers
//
// A value that starts with neither a quote nor a bracket is read the way
// hjson-py's scantfnns reads it: the text runs to the end of the line, and
// at each ',', '}', ']', '#', '//', '/*' and at the line end the text so far
// is tested. If it is exactly null, true, false (white space around allowed)
// or a number, that is the value and reading continues after it. Numbers
// follow JSON's grammar exactly (hjson-py's NUMBER_RE), so 5e8, 1e-5, -0 and
// 2.0 are numbers while +1, .5, 1., 01, 0x10, 1_000, NaN and Infinity are
// not. Otherwise the whole rest of the line, trimmed, becomes a string:
// `${zero_stage},` is the string "${zero_stage},", comma included, and
// `"a": x, "b": 1` sets a to the string `x, "b": 1`.
//
// Parse rejects every such string with a message that names the cause
// (template, bare word, Python literal, malformed number, swallowed line)
// and the fix. ParseHjson keeps them as Strings with Quoteless set, to show
// exactly what DeepSpeed would see.
//
// Value.Num keeps a number's literal as written. Float64, Int64, BigInt and
// IsIntegral read it exactly: "5e8" is the integer 500000000, and BigInt
// gives whole numbers beyond int64 as Python holds them. hjson-py itself turns a
// literal without fraction or exponent into a Python int, and any other into
// a float, made an int again when whole and below 1e10 in magnitude (so
// 2.0 is the int 2 but 1e14 stays a float). A literal that overflows float64
// (1e400) is an error: hjson-py fails on it with OverflowError.
//
// # Where Parse is stricter than DeepSpeed
//
//   - unquoted values that are not numbers, true, false or null (above);
//   - an empty input, or one of only comments (hjson-py returns {}, and
//     DeepSpeed then fails for want of a batch size);
//   - unquoted keys that contain a quote, a comment marker or unusual white
//     space, which are typos that send the setting nowhere;
//
// and, in both Parse and ParseHjson, a few inputs no real config contains:
// lone UTF-16 surrogates in \u escapes, \u escapes that are not four hex
// digits (hjson-py parses them with Python's int(x, 16), which allows signs
// and spaces), digits other than 0-9 in numbers, integers beyond float64
// range, control characters in unquoted keys, and nesting deeper than 400
// levels (hjson-py gives up near 490).
//
// # Deviations from JSON
//
// ParseWithDeviations also lists every place where the input uses Hjson
// syntax outside JSON (a comment, a trailing or a missing comma, an unquoted
// key, single quotes, a byte order mark, ...), in file order. DeepSpeed reads
// such a file, but Python's json.load, which HF's Trainer and Accelerate use
// to read a ds_config, rejects it. For any input Parse accepts, the list is
// empty exactly when encoding/json accepts the input (FuzzParse checks it).
//
// # Errors and positions
//
// Every error is an *Error: file, Pos, a message and usually a hint, printed
// as "file:line:col: msg; hint". Keys and values from the input appear in
// messages cut to their first 40 or 60 characters, so a 5 MB key makes a
// short message. Pos.Line and Pos.Col are 1-based, Col counts
// characters (not bytes), and a byte order mark takes no column. Parse never
// panics; FuzzParse checks that, the positions, and that MarshalJSON output
// parses back to the same tree.
package lenient
