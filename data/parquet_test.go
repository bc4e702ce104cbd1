package data

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/parquet-go/parquet-go"
)

// Shaped as pyarrow writes a Hugging Face dataset: every field optional,
// lists as LIST groups of optional elements.
type pqMessage struct {
	Role    *string `parquet:"role,optional"`
	Content *string `parquet:"content,optional"`
}

type pqRow struct {
	Messages    []pqMessage `parquet:"messages,list,optional"`
	Instruction *string     `parquet:"instruction,optional"`
	History     [][]string  `parquet:"history,list"`
	Turns       int64       `parquet:"turns"`
	Score       *float64    `parquet:"score,optional"`
	Tags        []string    `parquet:"tags"` // a legacy repeated field, no LIST group
}

func sp(s string) *string { return &s }

func writeParquet[T any](t *testing.T, path string, rows []T, opts ...parquet.WriterOption) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A round trip through parquet-go's writer: nested lists of structs, nulls,
// empty lists, lists of lists and legacy repeated fields come back as the
// values JSON would decode to. (No independent Parquet reader exists on
// this machine to check the file itself; TestParquetArrowShards reads
// files written by arrow-rs.)
func TestParquetRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rt.parquet")
	score := 0.5
	writeParquet(t, path, []pqRow{
		{
			Messages:    []pqMessage{{Role: sp("user"), Content: sp("Hi")}, {Role: sp("assistant"), Content: nil}},
			Instruction: sp("x"),
			History:     [][]string{{"q1", "a1"}, {"q2", "a2"}},
			Turns:       2,
			Score:       &score,
			Tags:        []string{"a", "b"},
		},
		{Turns: 3},
		{Messages: []pqMessage{}, History: [][]string{{}}, Turns: 4, Tags: []string{"c"}},
	}, parquet.MaxRowsPerRowGroup(2))
	var got []map[string]any
	var locs []Location
	if err := readParquet(path, func(r Record) error {
		got = append(got, r.Fields)
		locs = append(locs, r.Loc)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{
			"messages":    []any{map[string]any{"role": "user", "content": "Hi"}, map[string]any{"role": "assistant", "content": nil}},
			"instruction": "x",
			"history":     []any{[]any{"q1", "a1"}, []any{"q2", "a2"}},
			"turns":       int64(2),
			"score":       0.5,
			"tags":        []any{"a", "b"},
		},
		{"messages": nil, "instruction": nil, "history": []any{}, "turns": int64(3), "score": nil, "tags": []any{}},
		{"messages": []any{}, "instruction": nil, "history": []any{[]any{}}, "turns": int64(4), "score": nil, "tags": []any{"c"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if locs[2].Index != 2 || locs[2].String() != "data "+path+": row 2" {
		t.Errorf("location %v", locs[2])
	}
}

// Shards in the Hugging Face Hub layout, written by arrow-rs (see
// testdata/gen), hold the two conversations of testdata/messages.jsonl:
// they must tokenize to the same samples, which are the reference renders.
func TestParquetArrowShards(t *testing.T) {
	tok := loadTok(t, "qwen3")
	fromPQ, err := LoadSFT(filepath.Join("testdata", "hub"), tok, SFTOptions{Seq: 128})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := LoadSFT(filepath.Join("testdata", "messages.jsonl"), tok, SFTOptions{Seq: 128})
	if err != nil {
		t.Fatal(err)
	}
	if fromPQ.Stats.Format != FormatMessages || fromPQ.Stats.Records != 2 || len(fromPQ.Stats.Files) != 2 {
		t.Fatalf("stats %+v", fromPQ.Stats)
	}
	for i, g := range []goldenChat{golden(t, "qwen3", 0), golden(t, "qwen3", 1)} {
		ids, labels := fromPQ.Sample(i)
		jids, jlabels := fromJSON.Sample(i)
		if diff := cmp.Diff(g.IDs, ids); diff != "" {
			t.Errorf("sample %d ids (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(jlabels, labels); diff != "" || !cmp.Equal(jids, ids) {
			t.Errorf("sample %d differs from the JSON one:\n%s", i, diff)
		}
	}
	var sources []any
	if err := ReadRecords(fromPQ.Stats.Files, func(r Record) error {
		sources = append(sources, r.Fields["source"])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"messages.jsonl line 1", "messages.jsonl line 3"}, sources); diff != "" {
		t.Error(diff)
	}
}

// A Parquet shard and the JSON Lines file of the same records give the
// same samples, alpaca fields included.
func TestParquetMatchesJSON(t *testing.T) {
	type alpacaRow struct {
		Instruction *string    `parquet:"instruction,optional"`
		Input       *string    `parquet:"input,optional"`
		Output      *string    `parquet:"output,optional"`
		System      *string    `parquet:"system,optional"`
		History     [][]string `parquet:"history,list,optional"`
	}
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "pq", "data", "train-00000-of-00001.parquet"), []alpacaRow{
		{Instruction: sp("What is the capital of France?"), Input: sp(""), Output: sp("Paris.")},
		{Instruction: sp("Translate to French."), Input: sp("Good morning"), Output: sp("Bonjour"), System: sp("You are a translator.")},
		{Instruction: sp("And the next one?"), Input: sp(""), Output: sp("7."), System: sp("You are a terse assistant."),
			History: [][]string{{"Name three primes.", "2, 3, 5."}}},
	})
	tok := loadTok(t, "qwen3")
	a, err := LoadSFT(filepath.Join(dir, "pq"), tok, SFTOptions{Seq: 128, Packing: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadSFT(filepath.Join("testdata", "alpaca.json"), tok, SFTOptions{Seq: 128, Packing: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Stats.Format != FormatAlpaca || !cmp.Equal(a.ids, b.ids) || !cmp.Equal(a.labels, b.labels) || !cmp.Equal(a.rowSamples, b.rowSamples) {
		t.Errorf("Parquet and JSON alpaca data differ: %+v vs %+v", a.Stats, b.Stats)
	}
}
