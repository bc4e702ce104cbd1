// gen.mjs writes the golden files the tokenizer tests compare against.
//
// The reference is Hugging Face's own JavaScript port of `tokenizers`
// (@huggingface/tokenizers) and its Jinja engine (@huggingface/jinja), pinned
// in package.json. See README.md for how to run it.
//
// Outputs (under ../golden/):
//   corpus.json.gz  the 1,000 test strings and, per tokenizer, the ids of
//                   each string (add_special_tokens=true), the ids of the
//                   first 100 strings with add_special_tokens=false, and the
//                   reference decode of the ids.
//   chat.json       chat-template renders for Qwen3 and Llama-3, and the ids
//                   of each rendered conversation.
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const testdata = path.resolve(here, "..");
const shakespeare = process.argv[2] ?? path.resolve(testdata, "../../data/tinyshakespeare.txt");

// The tokenizers under test: directory under testdata/ → files.
const TOKENIZERS = ["qwen3", "llama3", "mistral", "gpt2style"];

function readJSON(p) {
  const raw = fs.readFileSync(p);
  return JSON.parse(p.endsWith(".gz") ? zlib.gunzipSync(raw).toString("utf8") : raw.toString("utf8"));
}

function loadTokenizer(name, patch) {
  const tj = readJSON(path.join(testdata, name, "tokenizer.json.gz"));
  const tc = readJSON(path.join(testdata, name, "tokenizer_config.json"));
  if (patch) tj.added_tokens.push(...patch);
  return { tok: new Tokenizer(tj, tc), json: tj, config: tc };
}

// mulberry32: a small seeded PRNG, so the corpus is reproducible.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20260601);
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

// Code point ranges for "random Unicode". Every range was fully assigned by
// Unicode 13 (or is permanently unassigned / private use), so the character
// classes agree between Go's Unicode 15.0 tables and Node's ICU (Unicode 17).
// U+0085 and U+FEFF are left out on purpose: the reference's built-in GPT-2
// ByteLevel regex uses ECMAScript \s, which differs from Oniguruma's \s (what
// the Rust tokenizers use) on exactly those two characters. The Go tests check
// them separately.
const RANGES = [
  [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0xff], [0x100, 0x17f], [0x180, 0x24f],
  [0x300, 0x36f], [0x370, 0x377], [0x391, 0x3c9], [0x400, 0x4ff], [0x5d0, 0x5ea],
  [0x620, 0x64a], [0x660, 0x669], [0x905, 0x939], [0x966, 0x96f], [0xe01, 0xe3a],
  [0x1100, 0x1112], [0x2000, 0x200a], [0x2010, 0x2027], [0x2028, 0x2029], [0x202f, 0x205f],
  [0x2070, 0x2079], [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2150, 0x218b], [0x2190, 0x21ff],
  [0x2200, 0x22ff], [0x2460, 0x24ff], [0x2500, 0x257f], [0x2600, 0x26ff], [0x3000, 0x303f],
  [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xe000, 0xe0ff],
  [0xfb00, 0xfb06], [0xfdd0, 0xfdef], [0xff01, 0xff5e], [0xfffc, 0xfffd], [0x1d400, 0x1d4ff],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x1f900, 0x1f9ff], [0x20000, 0x2a6d6],
];
function randomUnicode(n) {
  let s = "";
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(RANGES);
    s += String.fromCodePoint(int(lo, hi));
  }
  return s;
}

const CODE = [
  'func main() {\n\tfmt.Println("hello, world")\n}\n',
  "def f(x):\n    return x ** 2 + 3*x - 1  # comment\n",
  "for (let i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
  "#include <stdio.h>\nint main(void) {\r\n    printf(\"%d\\n\", 42);\r\n    return 0;\r\n}\r\n",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
  "<div class=\"x\">&nbsp;<a href='https://example.com/?q=1&r=2'>link</a></div>",
  '{"key": [1, 2.5, -3e10, null, true], "nested": {"a": "b"}}',
  "    if err != nil {\n        return fmt.Errorf(\"open %s: %w\", path, err)\n    }",
  "x = [i for i in range(10) if i % 2 == 0]\nprint(f\"{x!r:>20}\")",
  "fn add(a: i32, b: i32) -> i32 { a.wrapping_add(b) }",
  "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
  "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&=8;i|=9;j^=10;",
  "   \t  indented with mixed tabs\t\tand spaces   \n\t\n",
  "// TODO(user): fix this!!!\n/* block\n   comment */",
  "arr[0][1] = obj?.prop ?? defaultValue; // optional chaining",
];
const WORDS = ["the", "model", "ZeRO", "stage", "gradient", "Optimizer", "tensor", "rank", "shard", "offload"];

function corpus() {
  const text = fs.readFileSync(shakespeare, "utf8");
  const lines = text.split("\n");
  const out = [];
  // 1. Shakespeare: 300 chunks of 1–6 lines, some with CRLF line ends.
  for (let i = 0; i < 300; i++) {
    const start = int(0, lines.length - 8);
    let s = lines.slice(start, start + int(1, 6)).join("\n");
    if (i % 7 === 0) s = s.replaceAll("\n", "\r\n");
    if (i % 11 === 0) s = s.toUpperCase();
    out.push(s);
  }
  // 2. Code: the snippets, then recombined variants.
  for (const c of CODE) out.push(c);
  for (let i = 0; i < 85; i++) out.push(pick(CODE) + pick(["", "\n", "\n\n", "  ", "\t"]) + pick(CODE));
  // 3. Numbers.
  const nums = [
    "0", "7", "42", "123", "1234", "12345", "1234567890123", "3.14159265358979", "-0.001",
    "1e-9", "6.02214076e23", "1,234,567.89", "2026-06-01T12:34:56Z", "+1 (555) 010-9999",
    "0xDEADBEEF", "0b101010", "٣٤٥", "१२३", "１２３", "Ⅻ", "½ + ¼ = ¾", "x²+y²=z²",
  ];
  for (const n of nums) out.push(n);
  for (let i = 0; i < 58; i++) {
    const k = int(1, 40);
    let s = "";
    for (let j = 0; j < k; j++) s += String(int(0, 9));
    out.push(pick(["", " ", "v", "$", "#", "item "]) + s + pick(["", ".", " apples", "%", "\n"]));
  }
  // 4. CJK and other scripts.
  const cjk = [
    "你好，世界！", "深度学习模型的训练需要大量的计算资源。", "日本語のテキストも正しく処理できますか？",
    "カタカナとひらがなとKanji漢字", "한국어 문장도 토큰화합니다.", "中文English混合123测试",
    "「引用」と『二重引用』", "全角スペース　を含む", "Привет, мир! Как дела?", "Γειά σου Κόσμε",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Tiếng Việt có dấu",
  ];
  for (const c of cjk) out.push(c);
  for (let i = 0; i < 65; i++) out.push(pick(cjk) + pick(["", " ", "\n", "。", "!"]) + pick(cjk));
  // 5. Emoji.
  const emoji = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "☺︎", "🧑🏿‍🚀", "🏳️‍🌈", "🤖 robots!", "🎉🎉🎉",
    "I ❤ NY", "emoji at end 🙂", "😀😃😄😁😆😅😂🤣", "#️⃣ 1️⃣ 2️⃣", "👩🏻‍💻 coding",
  ];
  for (const e of emoji) out.push(e);
  for (let i = 0; i < 45; i++) out.push(pick(WORDS) + pick([" ", "", "  "]) + pick(emoji) + pick(["", " ", "."]) + pick(emoji));
  // 6. Whitespace runs.
  const ws = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2003", " \n ", "\t\n\t"];
  for (const w of ws) out.push(w);
  out.push("", "        ", "\n\n\n\n\n\n", "trailing   ", "   leading", "a \n b", "a\r\nb\r\n\r\nc");
  for (let i = 0; i < 59; i++) {
    let s = "";
    for (let j = int(1, 8); j > 0; j--) s += pick(WORDS) + pick(ws).repeat(int(1, 4));
    out.push(s);
  }
  // 7. Accents, combining marks, compatibility characters (NFC/NFKC matter).
  const acc = [
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "ﬁne ﬂour",
    "Ｆｕｌｌｗｉｄｔｈ", "ǅungla", "ẛ̣", "한\u1100\u1161", "\u1112\u1161\u11ab", "Å (U+212B)", "Ω ohm",
    "e\u0301\u0301\u0301", "ﷺ", "㍿", "™ ℠ ℃", "ｶﾀｶﾅ", "①②③",
  ];
  for (const a of acc) out.push(a);
  for (let i = 0; i < 40; i++) out.push(pick(acc) + " " + pick(WORDS) + " " + pick(acc));
  // 8. Special-token strings of every family (each tokenizer sees the others' as text).
  const specials = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<s>", "</s>", "<unk>", "<EOT>", "<META>",
    "<think>", "</think>", "<tool_call>", "<|reserved_special_token_5|>", "<|fim_prefix|>",
  ];
  for (const s of specials) out.push(s);
  out.push(
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>[INST] What is 2+2? [/INST] 4</s>",
    "<|im_", "im_end|>", "<<|im_end|>>", "<|im_end|><|im_end|>", " <s> ", "text</s>text",
  );
  for (let i = 0; i < 34; i++) out.push(pick(WORDS) + pick(["", " ", "\n"]) + pick(specials) + pick(["", " ", "\n"]) + pick(WORDS) + pick(specials));
  // 9. Contractions and case.
  const con = ["don't", "I'M", "we'LL", "they've", "She'S", "it'd", "you're", "'s", "''", "can't'nt", "O'Neil's", "'S'T'RE"];
  for (const c of con) out.push(c);
  for (let i = 0; i < 28; i++) out.push(pick(con) + pick([" ", "", "  "]) + pick(con));
  // 10. Random Unicode.
  for (let i = 0; i < 100; i++) out.push(randomUnicode(int(1, 60)));
  // 11. Long and pathological strings.
  out.push("a".repeat(3000), " ".repeat(1000), "9".repeat(500), "\n".repeat(300), "ab".repeat(1500));
  out.push("的".repeat(800), "😀".repeat(200), lines.slice(1000, 1400).join("\n"));
  while (out.length < 1000) out.push(randomUnicode(int(1, 30)) + " " + pick(WORDS));
  if (out.length !== 1000) throw new Error(`corpus has ${out.length} strings`);
  return out;
}

// Extra added tokens patched into the Qwen3 tokenizer, to exercise the lstrip,
// rstrip and normalized flags, which none of the real files use.
const FLAGS_PATCH = [
  { id: 151669, content: "<mask>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
  { id: 151670, content: "<sep>", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
  { id: 151671, content: "cafe\u0301 au lait", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  { id: 151672, content: "<both>", single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
];
const FLAGS_STRINGS = [
  "a <mask> b", "a   <mask>   b", "<mask> start", "end   <mask>", "x<sep>   y", "x   <sep>y",
  "one café au lait please", "one cafe\u0301 au lait please", "café au laitcafé au lait",
  "  <both>  ", "a\t<both>\n\nb", "<mask><sep><both>", "a \u3000<mask>", "<sep>\u00a0\u00a0z",
  "  <mask>  <sep>  <both>  ", "no special tokens here",
];

const CONVERSATIONS = [
  [{ role: "user", content: "What is the capital of France?" }, { role: "assistant", content: "Paris." }],
  [
    { role: "system", content: "You are a terse assistant." },
    { role: "user", content: "Name three primes." },
    { role: "assistant", content: "2, 3, 5." },
    { role: "user", content: "And the next one?" },
    { role: "assistant", content: "7." },
  ],
  [{ role: "user", content: "  padded question  \n" }, { role: "assistant", content: "<think>\nLet me think.\n</think>\n\nThe answer is 42." }],
  [{ role: "user", content: "你好！用中文回答。" }, { role: "assistant", content: "好的，没问题。😀" }, { role: "user", content: "谢谢" }],
];

function specialTokensMap(config) {
  // What transformers passes to the template: the special tokens that are set.
  const out = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const v = config[k];
    if (v == null) continue;
    out[k] = typeof v === "string" ? v : v.content;
  }
  return out;
}

function main() {
  const strings = corpus();
  const result = { generator: "gen.mjs", reference: "@huggingface/tokenizers@0.2.0", strings, tokenizers: {} };
  for (const name of TOKENIZERS) {
    const { tok } = loadTokenizer(name);
    const ids = strings.map((s) => tok.encode(s).ids);
    const plain = strings.slice(0, 100).map((s) => tok.encode(s, { add_special_tokens: false }).ids);
    const decoded = ids.map((x) => (x.length ? tok.decode(x, { clean_up_tokenization_spaces: false }) : ""));
    result.tokenizers[name] = { ids, ids_no_special: plain, decoded };
  }
  {
    const { tok } = loadTokenizer("qwen3", FLAGS_PATCH);
    result.flags = { base: "qwen3", added_tokens: FLAGS_PATCH, strings: FLAGS_STRINGS, ids: FLAGS_STRINGS.map((s) => tok.encode(s).ids) };
  }
  const golden = path.join(testdata, "golden");
  fs.mkdirSync(golden, { recursive: true });
  fs.writeFileSync(path.join(golden, "corpus.json.gz"), zlib.gzipSync(JSON.stringify(result), { level: 9 }));

  const chat = { reference: "@huggingface/jinja@0.5.11", cases: [] };
  for (const name of ["qwen3", "llama3"]) {
    const { tok, config } = loadTokenizer(name);
    const tmpl = new Template(config.chat_template);
    for (const [i, messages] of CONVERSATIONS.entries()) {
      for (const add_generation_prompt of [false, true]) {
        const rendered = tmpl.render({ messages, add_generation_prompt, ...specialTokensMap(config) });
        const ids = tok.encode(rendered, { add_special_tokens: false }).ids;
        chat.cases.push({ tokenizer: name, conversation: i, messages, add_generation_prompt, rendered, ids });
      }
    }
  }
  fs.writeFileSync(path.join(golden, "chat.json"), JSON.stringify(chat, null, 1) + "\n");
  console.log(`wrote ${strings.length} strings × ${TOKENIZERS.length} tokenizers, ${chat.cases.length} chat cases`);
}

main();
