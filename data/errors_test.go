package data

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// Bad data is an error naming the file, the record (and line) and the fix.
func TestSFTErrors(t *testing.T) {
	dir := t.TempDir()
	alpacaOK := `{"instruction": "Say hi.", "input": "", "output": "Hi."}`
	var emptyPQ bytes.Buffer
	w := parquet.NewGenericWriter[struct {
		Text string `parquet:"text"`
	}](&emptyPQ)
	w.Close()
	for _, tc := range []struct {
		name, file, content string
		opt                 SFTOptions
		tok                 string
		want                []string
	}{
		{"empty json", "e.json", "", SFTOptions{}, "", []string{"e.json", "the file is empty"}},
		{"blank json", "b.json", " \n\t\n", SFTOptions{}, "", []string{"b.json", "the file is empty"}},
		{"empty array", "a.json", "[]", SFTOptions{}, "", []string{"a.json", "empty array"}},
		{"empty jsonl", "e.jsonl", "\n\n", SFTOptions{}, "", []string{"e.jsonl", "the file is empty"}},
		{"empty parquet", "e.parquet", "", SFTOptions{}, "", []string{"e.parquet", "the file is empty"}},
		{"parquet without rows", "n.parquet", emptyPQ.String(), SFTOptions{}, "", []string{"n.parquet", "holds no rows"}},
		{"not parquet", "x.parquet", "PAR1 but not really", SFTOptions{}, "", []string{"x.parquet", "not a readable Parquet file"}},
		{"missing field", "m.json", "[\n" + alpacaOK + ",\n" + `{"instruction": "Say bye.", "input": ""}` + "\n]", SFTOptions{Format: FormatAlpaca}, "",
			[]string{"m.json", "record 1 (line 3)", `field "output" is missing`, "alpaca records are"}},
		{"null field", "n.jsonl", alpacaOK + "\n" + `{"instruction": "x", "output": null}` + "\n", SFTOptions{}, "",
			[]string{"n.jsonl", "record 1 (line 2)", `field "output" is null`}},
		{"wrong type", "w.jsonl", `{"instruction": 5, "output": "x"}`, SFTOptions{}, "",
			[]string{"w.jsonl", "record 0 (line 1)", `field "instruction" is a number, want a string`}},
		{"invalid UTF-8 jsonl", "u.jsonl", alpacaOK + "\n" + `{"instruction": "caf` + "\xe9" + `", "output": "x"}` + "\n", SFTOptions{}, "",
			[]string{"u.jsonl", "record 1 (line 2)", "invalid UTF-8", "re-encode"}},
		{"invalid UTF-8 json", "u.json", "[" + alpacaOK + ",\n\n" + `{"text": "` + "\xff" + `"}]`, SFTOptions{}, "",
			[]string{"u.json", "record 1 (line 3)", "invalid UTF-8"}},
		{"bad json line", "j.jsonl", alpacaOK + "\n" + `{"instruction": "x", "output": }` + "\n", SFTOptions{}, "",
			[]string{"j.jsonl", "record 1 (line 2)", "invalid JSON", "fix the JSON"}},
		{"bad json array", "j.json", "[" + alpacaOK + ",\n{\"text\": }]", SFTOptions{}, "",
			[]string{"j.json", "record 1", "line 2", "fix the JSON"}},
		{"one object", "o.json", "{\n  \"version\": 1,\n  \"train\": [" + alpacaOK + "]\n}\n", SFTOptions{}, "",
			[]string{"o.json", "one JSON object over several lines", `under "train"`}},
		{"unclosed array", "c.json", "[" + alpacaOK, SFTOptions{}, "", []string{"c.json", "not closed"}},
		{"not an object", "o.jsonl", `["a", "b"]`, SFTOptions{}, "", []string{"o.jsonl", "record 0 (line 1)", "not a JSON object"}},
		{"unknown fields", "f.jsonl", `{"question": "q", "answer": "a"}`, SFTOptions{}, "",
			[]string{"f.jsonl", "record 0 (line 1)", `"answer", "question"`, "cannot tell the data format"}},
		{"too long", "l.jsonl", `{"text": "Hi"}` + "\n\n" + `{"text": "` + strings.Repeat("word ", 40) + `"}`, SFTOptions{Seq: 16}, "",
			[]string{"l.jsonl", "record 1 (line 3)", "longer than the sequence length 16", "raise --seq", "truncation"}},
		{"sharegpt turns", "s.json", `[{"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"}]}]`, SFTOptions{}, "",
			[]string{"s.json", "record 0 (line 1)", "message 1 is user where the turns need assistant"}},
		{"sharegpt ends with human", "s2.json", `[{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "a"}]}]`, SFTOptions{}, "",
			[]string{"s2.json", "has 1 turns", "ends with the assistant"}},
		{"unknown role", "r.jsonl", `{"messages": [{"role": "narrator", "content": "x"}]}`, SFTOptions{}, "",
			[]string{"r.jsonl", "record 0 (line 1)", `role "narrator"`}},
		{"multimodal content", "mm.jsonl", `{"messages": [{"role": "user", "content": [{"type": "image"}]}]}`, SFTOptions{}, "",
			[]string{"mm.jsonl", "multimodal"}},
		{"nothing to learn", "z.jsonl", `{"messages": [{"role": "user", "content": "hello"}]}`, SFTOptions{}, "",
			[]string{"z.jsonl", "record 0 (line 1)", "no token that takes a loss", "no assistant message"}},
		{"prompt kinds differ", "p.jsonl", `{"prompt": [{"role": "user", "content": "q"}], "completion": "a"}`, SFTOptions{}, "",
			[]string{"p.jsonl", `"prompt" is a list and "completion" is a string`}},
		{"no chat template", "t.jsonl", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}`, SFTOptions{}, "gpt2style",
			[]string{"t.jsonl", "record 0 (line 1)", "has none", "give a chat template"}},
		{"tools", "tools.jsonl", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": [{"type": "function"}]}`,
			SFTOptions{}, "", []string{"tools.jsonl", "record 0 (line 1)", `"tools" is set`}},
		{"history shape", "h.json", `[{"instruction": "q", "output": "a", "history": [["only one"]]}]`, SFTOptions{}, "",
			[]string{"h.json", `field "history" entry 0 is not a [prompt, response] pair`}},
		{"all empty text", "et.jsonl", `{"text": ""}`, SFTOptions{}, "", []string{"et.jsonl", "no records to train on", "1 with empty text"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, tc.file, tc.content)
			opt := tc.opt
			if opt.Seq == 0 {
				opt.Seq = 256
			}
			tok := tc.tok
			if tok == "" {
				tok = "qwen3"
			}
			_, err := LoadSFT(path, loadTok(t, tok), opt)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestResolveFiles(t *testing.T) {
	dir := t.TempDir()
	hub := filepath.Join(dir, "hub")
	for _, name := range []string{"data/train-00001-of-00002.parquet", "data/train-00000-of-00002.parquet", "data/test-00000-of-00001.parquet", "README.md"} {
		writeFile(t, hub, name, "x")
	}
	flat := filepath.Join(dir, "flat")
	writeFile(t, flat, "b.jsonl", "x")
	writeFile(t, flat, "a.jsonl", "x")
	mixed := filepath.Join(dir, "mixed")
	writeFile(t, mixed, "a.jsonl", "x")
	writeFile(t, mixed, "b.parquet", "x")
	for _, tc := range []struct {
		path string
		want []string
		err  string
	}{
		{hub, []string{"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}, ""},
		{filepath.Join(hub, "data", "*.parquet"), []string{"data/test-00000-of-00001.parquet", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}, ""},
		{flat, []string{"a.jsonl", "b.jsonl"}, ""},
		{filepath.Join(flat, "a.jsonl"), []string{"a.jsonl"}, ""},
		{mixed, nil, "mixes"},
		{filepath.Join(dir, "none.json"), nil, "no such file"},
		{filepath.Join(dir, "nomatch-*.json"), nil, "matches no"},
		{filepath.Join(hub, "README.md"), nil, "not a .json"},
		{t.TempDir(), nil, "holds no .json"},
	} {
		got, err := ResolveFiles(tc.path)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.path, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		base := filepath.Dir(tc.path)
		if st, _ := os.Stat(tc.path); st != nil && st.IsDir() {
			base = tc.path
		} else if strings.Contains(tc.path, "*") {
			base = hub
		}
		for i := range got {
			got[i], _ = filepath.Rel(base, got[i])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %v, want %v", tc.path, got, tc.want)
		}
	}
	if !IsRecordData(hub) || !IsRecordData("x.parquet") || IsRecordData("input.txt") || IsRecordData("train.bin") {
		t.Error("IsRecordData")
	}
}

func TestTruncation(t *testing.T) {
	dir := t.TempDir()
	long := `{"text": "` + strings.Repeat("word ", 40) + `"}`
	// A prompt that fills the row leaves nothing to learn: dropped.
	filled := `{"prompt": "` + strings.Repeat("word ", 40) + `", "completion": " done"}`
	short := `{"text": "Hello"}`
	path := writeFile(t, dir, "t.jsonl", long+"\n"+filled+"\n"+short+"\n")
	d, err := LoadSFT(path, loadTok(t, "qwen3"), SFTOptions{Seq: 16, Truncate: true, Format: FormatText})
	if err == nil {
		t.Fatal("a prompt-completion record read as text")
	}
	writeFile(t, dir, "t.jsonl", long+"\n"+short+"\n")
	if d, err = LoadSFT(path, loadTok(t, "qwen3"), SFTOptions{Seq: 16, Truncate: true}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := d.Sample(0); len(ids) != 16 || d.Stats.Truncated != 1 || d.Stats.Samples != 2 {
		t.Errorf("truncated sample of %d tokens, stats %+v", len(ids), d.Stats)
	}
	writeFile(t, dir, "t.jsonl", filled+"\n"+`{"prompt": "Hi", "completion": " there"}`+"\n")
	if d, err = LoadSFT(path, loadTok(t, "qwen3"), SFTOptions{Seq: 16, Truncate: true}); err != nil {
		t.Fatal(err)
	}
	if d.Stats.Dropped != 1 || d.Stats.Samples != 1 || d.Stats.Truncated != 1 {
		t.Errorf("stats %+v, want one truncated and dropped, one kept", d.Stats)
	}
	if !strings.Contains(d.Stats.Describe(16), "1 truncated (1 of them dropped") {
		t.Errorf("Describe: %s", d.Stats.Describe(16))
	}
}

// Empty tool lists and a byte-order mark are fine.
func TestSFTAccepts(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "bom.json", "\ufeff[\n"+`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": "[]"}`+"]")
	d, err := LoadSFT(path, loadTok(t, "qwen3"), SFTOptions{Seq: 64})
	if err != nil {
		t.Fatal(err)
	}
	if d.Stats.Records != 1 || d.Stats.Format != FormatMessages {
		t.Errorf("stats %+v", d.Stats)
	}
}
