#!/usr/bin/env python3
"""Regenerate golden.json: what hjson-py 3.1.0 does with each case.

Run from dsconfig/lenient:

    git clone https://github.com/hjson/hjson-py /tmp/hjson-py   # commit 9351a27: release 3.1.0 plus a docs/index.html fix
    python3 testdata/hjsonpy/gen.py /tmp/hjson-py > testdata/hjsonpy/golden.json

Each input is written to a file and read exactly as DeepSpeed's load_ds_config
reads a config path (deepspeed/runtime/tensor_parallel/init_utils.py, v0.19.5):
hjson.load(open(path, "r"), object_pairs_hook=dict_raise_error_on_duplicate_keys),
with a UTF-8 locale. Text mode turns "\r\n" and "\r" into "\n" before hjson-py
sees the text. Values are written as typed trees so the Go test can compare
Python's int/float split: ["null"], ["bool", b], ["int", "123"],
["float", repr], ["str", s], ["list", [...]], ["dict", [[key, value], ...]].
"""
import base64
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import hjson  # noqa: E402


def dict_raise_error_on_duplicate_keys(ordered_pairs):
    """Copied from deepspeed/runtime/config_utils.py (v0.19.5)."""
    d = dict((k, v) for k, v in ordered_pairs)
    if len(d) != len(ordered_pairs):
        counter = collections.Counter([pair[0] for pair in ordered_pairs])
        keys = [key for key, value in counter.items() if value > 1]
        raise ValueError("Duplicate keys in DeepSpeed config: {}".format(keys))
    return d


def typed(v):
    if v is None:
        return ["null"]
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", str(v)]
    if isinstance(v, float):
        return ["float", repr(v)]
    if isinstance(v, str):
        return ["str", v]
    if isinstance(v, list):
        return ["list", [typed(e) for e in v]]
    if isinstance(v, dict):
        return ["dict", [[k, typed(e)] for k, e in v.items()]]
    raise TypeError(type(v))


def load(data):
    fd, path = tempfile.mkstemp()
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with open(path, "r", encoding="utf-8") as f:
            v = hjson.load(f, object_pairs_hook=dict_raise_error_on_duplicate_keys)
        return {"ok": True, "value": typed(v)}
    except Exception as e:  # RecursionError, IndexError, OverflowError, ...
        return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    finally:
        os.unlink(path)


def deep(n):
    return '{"a":' * n + "1" + "}" * n


def num(x):
    return '{"a": %s}' % x


CASES = [
    # comments
    ("comment/hash", '{"a": 1 # c\n}'),
    ("comment/slashes", '{"a": 1 // c\n}'),
    ("comment/block_multiline", '{"a": /* x\n y */ 1}'),
    ("comment/block_in_array", '{"a": [1, /* two */ 2, /*\n*/ 3]}'),
    ("comment/before_root", "// hi\n# ho\n/* x */ {\"a\": 1}"),
    ("comment/only", "# nothing\n// here\n"),
    ("comment/block_unterminated", '{"a": 1 /* x'),
    ("comment/block_empty", '{"a": /**/ 1}'),
    ("comment/block_slash_star_slash", '{"a": /*/ 1}'),
    ("comment/hash_in_string", '{"a": "x # y // z /* w */"}'),
    ("comment/after_number_glued", '{"a": 5#c\n}'),
    ("comment/after_word_glued", '{"a": abc#c\n}'),
    ("comment/after_literal_block", '{"a": true/*c*/}'),
    ("comment/between_key_and_colon", '{"a" /* c */ : 1}'),
    ("comment/after_root", '{"a": 1} // end'),
    ("value/url", "a: http://x.y/z"),
    ("value/path", "a: /usr/bin"),
    # commas
    ("comma/trailing_object", '{"a": 1,}'),
    ("comma/trailing_array", '{"a": [1, 2,]}'),
    ("comma/newline_separated", '{\n"a": 1\n"b": [\n1\n2\n]\n}'),
    ("comma/omitted_after_strings", '{"a": "x" "b": "y"}'),
    ("comma/omitted_in_array_strings", '{"a": ["x" "y" {"z": 1} [2]]}'),
    ("comma/omitted_after_object", '{"a": {} "b": []}'),
    ("comma/double_in_array", '{"a": [1,,2]}'),
    ("comma/double_in_object", '{"a": 1,,}'),
    ("comma/leading_in_array", '{"a": [,1]}'),
    ("comma/leading_in_object", '{,"a": 1}'),
    ("comma/only_in_array", '{"a": [,]}'),
    ("comma/numbers_same_line", '{"a": [1 2]}'),
    ("comma/numbers_newline", '{"a": [1\n2]}'),
    # keys
    ("key/quoteless", "{a: 1}"),
    ("key/quoteless_space_before_colon", "{a  : 1}"),
    ("key/space_inside", "{a b: 1}"),
    ("key/newline_before_colon", "{a\n: 1}"),
    ("key/dash_dot", "{a-b.c: 1}"),
    ("key/single_quoted", "{'a': 1}"),
    ("key/empty_quoted", '{"": 1}'),
    ("key/empty_bare", "{: 1}"),
    ("key/comment_glued", "a/*c*/: 1"),
    ("key/hash_inside", "{a#b: 1}"),
    ("key/brace_inside", "{a{: 1}"),
    ("key/quote_inside", '{a": 1}'),
    ("key/unicode", "{\u00e9t\u00e9: 1}"),
    ("key/nbsp", "{\u00a0a: 1}"),
    ("key/form_feed", "{\x0ca: 1}"),
    ("key/eof", "{a"),
    ("key/missing_colon", '{"a" 1}'),
    ("key/stray_word", '{\n  foo\n  "a": 1\n}'),
    ("key/multiline_quotes", "{'''a''': 1}"),
    # root
    ("root/braceless", "a: 1\nb: 2"),
    ("root/braceless_quoted_keys", '"a": 1, "b": {"c": [1]}'),
    ("root/braceless_trailing_comma", "a: 1,"),
    ("root/array", "[1, 2]"),
    ("root/number", "5"),
    ("root/string", '"abc"'),
    ("root/word", "hello"),
    ("root/true", "true"),
    ("root/empty", ""),
    ("root/white_space_only", "  \n\t\n"),
    ("root/bom_only", "\ufeff"),
    ("root/bom_object", '\ufeff{"a": 1}'),
    ("root/bom_braceless", "\ufeffa: 1"),
    ("root/extra_data", '{"a":1} x'),
    ("root/extra_brace", '{"a":1}}'),
    ("root/two_objects", '{"a":1}{"b":2}'),
    ("root/unclosed_object", '{"a": 1'),
    ("root/unclosed_array", '{"a": [1'),
    ("root/unclosed_nested", '{"a": {"b": 1}'),
    ("root/stray_close", "}"),
    ("root/braceless_then_close", "a: 1\n}"),
    ("root/mismatched_close", '{"a": [1}'),
    ("root/value_missing", '{"a": }'),
    ("root/value_missing_eof", '{"a":'),
    ("root/colon_as_value", '{"a": :}'),
    # numbers
    ("num/zero", num("0")),
    ("num/neg_zero", num("-0")),
    ("num/neg_zero_float", num("-0.0")),
    ("num/one", num("1")),
    ("num/neg_one", num("-1")),
    ("num/frac", num("0.9")),
    ("num/5e8", num("5e8")),
    ("num/5E8", num("5E8")),
    ("num/5e+8", num("5e+8")),
    ("num/1e14", num("1e14")),
    ("num/1e-5", num("1e-5")),
    ("num/2.0", num("2.0")),
    ("num/2.5", num("2.5")),
    ("num/1e10", num("1e10")),
    ("num/9.99e9", num("9.99e9")),
    ("num/1e400", num("1e400")),
    ("num/neg_1e400", num("-1e400")),
    ("num/1.0e400", "a: 1.0e400\n"),
    ("num/1e-400", num("1e-400")),
    ("num/1.5e300", num("1.5e300")),
    ("num/big_int", num("123456789012345678901234567890")),
    ("num/int64_max_plus_1", num("9223372036854775808")),
    ("num/int_400_digits", num("1" * 400)),
    ("num/leading_dot", num(".5")),
    ("num/leading_plus", num("+1")),
    ("num/leading_zero", num("01")),
    ("num/double_zero", num("00")),
    ("num/hex", num("0x10")),
    ("num/underscore", num("1_000")),
    ("num/trailing_dot", num("1.")),
    ("num/trailing_e", num("1e")),
    ("num/trailing_e_plus", num("1e+")),
    ("num/minus_only", num("-")),
    ("num/minus_word", num("-a")),
    ("num/nan", num("NaN")),
    ("num/infinity", num("Infinity")),
    ("num/neg_infinity", num("-Infinity")),
    ("num/inf", num("inf")),
    ("num/comment_after", '{"a": 5e8 # c\n}'),
    ("num/space_after", '{"a": 5 ,"b": 6\t}'),
    ("num/two_numbers", '{"a": 1 2}'),
    ("num/double_dot", '{"a": 1.5.5}'),
    ("num/exp_frac", '{"a": 1e5.5}'),
    ("num/unit_suffix", '{"a": 5GB}'),
    ("num/arabic_digit", "{\"a\": 1\u0663}"),
    ("num/nbsp_after", "{\"a\": 5\u00a0}"),
    ("num/newline_ends", "a: 5\nb: -0.5e-3\n"),
    # literals
    ("lit/true_false_null", '{"a": true, "b": false, "c": null}'),
    ("lit/space_after", '{"a": true ,"b": null\t}'),
    ("lit/glued_word", '{"a": truex}'),
    ("lit/null_glued", '{"a": nullx}'),
    ("lit/two_words", '{"a": true false}'),
    ("lit/python_true", '{"a": True}'),
    ("lit/python_false_comma", '{"a": False,\n"b": 1}'),
    ("lit/python_none", '{"a": None\n}'),
    ("lit/upper", '{"a": TRUE}'),
    ("lit/nbsp_after", "{\"a\": true\u00a0,\n\"b\": 1}"),
    ("lit/vertical_tab_after", '{"a": true\x0b}'),
    ("lit/nbsp_before", "{\"a\": \u00a0true}"),
    ("lit/form_feed_before", '{"a":\x0c1}'),
    # quoteless strings
    ("bare/auto", '{"a": auto}'),
    ("bare/auto_comma", '{"a": auto,\n"b": 1}'),
    ("bare/fp16", '{"a": fp16\n}'),
    ("bare/template", '{"zero_optimization": {\n  "stage": ${zero_stage},\n}}'),
    ("bare/template_dollar", "a: $ZERO_STAGE\n"),
    ("bare/jinja", "a: {{ stage }}\n"),
    ("bare/sentence", '{"a": hello world, "b": 1}'),
    ("bare/nul", '{"a": \x00}'),
    ("bare/in_array", '{"a": [x, y]}'),
    # strings
    ("str/single_quoted", "{\"a\": 'x\"y'}"),
    ("str/single_in_double", '{"a": "it\'s"}'),
    ("str/escaped_single", '{"a": "\\\'"}'),
    ("str/escapes", '{"a": "\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u00E9"}'),
    ("str/surrogate_pair", '{"a": "\\ud83d\\ude00"}'),
    ("str/lone_high_surrogate", '{"a": "\\ud800"}'),
    ("str/lone_low_surrogate", '{"a": "\\udc00"}'),
    ("str/high_then_non_low", '{"a": "\\ud800\\u0041"}'),
    ("str/bad_escape", '{"a": "\\q"}'),
    ("str/windows_path", '{"a": "C:\\temp"}'),
    ("str/short_unicode", '{"a": "\\u12"}'),
    ("str/unicode_0x", '{"a": "\\u0x12"}'),
    ("str/unicode_spaces", '{"a": "\\u 1a "}'),
    ("str/unicode_plus", '{"a": "\\u+123"}'),
    ("str/nul_escape", '{"a": "\\u0000"}'),
    ("str/raw_tab", '{"a": "x\ty"}'),
    ("str/raw_newline", '{"a": "x\ny"}'),
    ("str/raw_cr", '{"a": "x\ry"}'),
    ("str/raw_del_unicode", '{"a": "\u00e9\x7f\u2028"}'),
    ("str/unterminated", '{"a": "x'),
    ("str/escape_at_eof", '{"a": "x\\'),
    ("str/empty_single", "{\"a\": ''}"),
    ("str/empty_double", '{"a": ""}'),
    # multiline strings
    ("ml/indented", "{\n  a: '''\n    x\n     y\n    '''\n}\n"),
    ("ml/inline", "a: '''xy'''\n"),
    ("ml/quotes_inside", "a: '''it''s'''\n"),
    ("ml/unterminated", "a: '''x\n"),
    ("ml/no_line_break_anywhere", "a: '''x'''"),
    ("ml/first_line_no_final_newline", "a: '''x\n  y'''"),
    ("ml/crlf", "{\r\n  a: '''\r\n    x\r\n    y\r\n    '''\r\n}\r\n"),
    ("ml/tab_indent", "{\n\ta: '''\n\t\tx\n\t\t'''\n}\n"),
    ("ml/less_indented", "{\n    a: '''\n  x\n    '''\n}\n"),
    ("ml/control_chars", "{\n  a: '''\n  x\ty\x01\n  '''\n}\n"),
    ("ml/four_quotes", "{\n  a: ''''x'''\n}\n"),
    ("ml/in_array", "{\n  a: [\n    '''\n    x\n    '''\n  ]\n}\n"),
    # line endings
    ("eol/crlf", '{\r\n"a": 1,\r\n"b": [1,\r\n2]\r\n}\r\n'),
    ("eol/cr", '{\r"a": 1\r"b": 2\r}'),
    ("eol/quoteless_ends_at_cr", "a: 1\rb: true\r"),
    ("eol/comment_ends_at_cr", '{"a": 1 # c\r"b": 2}'),
    # duplicates
    ("dup/top", '{"a":1,"a":2}'),
    ("dup/nested", '{"x":{"a":1,\n"a":2}}'),
    ("dup/in_array", '{"x":[{"a":1,"a":2}]}'),
    ("dup/braceless", "a:1\na:2"),
    ("dup/quoteless_vs_quoted", '{a:1, "a":2}'),
    ("dup/escaped", '{"a":1,"\\u0061":2}'),
    ("dup/case_differs", '{"a":1,"A":2}'),
    ("dup/same_key_other_objects", '{"x":{"a":1},"y":{"a":2}}'),
    # depth
    ("depth/400", deep(400)),
    ("depth/401", deep(401)),
    ("depth/600", deep(600)),
    ("depth/array_400", '{"a":' + "[" * 399 + "]" * 399 + "}"),
]

BYTE_CASES = [
    ("utf8/invalid_in_string", b'{"a": "\xff"}'),
    ("utf8/truncated_bom", b'\xef\xbb{"a": 1}'),
    ("utf8/utf16_bom", b'\xff\xfe{\x00}\x00'),
    ("utf8/encoded_surrogate", b'{"a": "\xed\xa0\x80"}'),
    ("utf8/overlong", b'{"a": "\xc0\xaf"}'),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    corpus = os.path.join(here, "..", "..", "..", "testdata", "ds_configs")
    commit = subprocess.run(["git", "-C", sys.argv[1], "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {"hjson_py": hjson.__version__, "commit": commit,
           "python": sys.version.split()[0], "cases": []}
    for name, text in CASES:
        res = load(text.encode("utf-8"))
        if name.startswith("depth/") and res["ok"]:
            res["value"] = None  # too deep for json.dump; the outcome is what matters
        out["cases"].append(dict(name=name, input=text, **res))
    for name, data in BYTE_CASES:
        out["cases"].append(dict(name=name, input_b64=base64.b64encode(data).decode(), **load(data)))
    for path in sorted(glob.glob(os.path.join(corpus, "*.json")) + glob.glob(os.path.join(corpus, "*.conf"))):
        with open(path, "rb") as f:
            data = f.read()
        base = os.path.basename(path)
        out["cases"].append(dict(name="corpus/" + base, corpus_file=base, **load(data)))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
