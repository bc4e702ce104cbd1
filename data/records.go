package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Location names one record of a data file, for messages: the file, the
// record's 0-based index in it (dataset[i] in Hugging Face datasets), and
// the 1-based line it starts on when the file is text.
type Location struct {
	File  string
	Index int
	Line  int // 0 when the file has no lines (Parquet)
}

func (l Location) String() string {
	kind := "record"
	if strings.HasSuffix(l.File, ".parquet") {
		kind = "row"
	}
	if l.Line > 0 {
		return fmt.Sprintf("data %s: %s %d (line %d)", l.File, kind, l.Index, l.Line)
	}
	return fmt.Sprintf("data %s: %s %d", l.File, kind, l.Index)
}

// Record is one row of a data file: its fields as JSON decodes them
// (string, float64 or int64, bool, nil, []any, map[string]any), whether it
// came from JSON or Parquet.
type Record struct {
	Loc    Location
	Fields map[string]any
}

// recordFile kinds, by file name.
const (
	kindJSON    = "json"
	kindJSONL   = "jsonl"
	kindParquet = "parquet"
)

func fileKind(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return kindJSON
	case ".jsonl", ".ndjson":
		return kindJSONL
	case ".parquet":
		return kindParquet
	}
	return ""
}

// IsRecordData reports whether path names record data for fine-tuning (a
// .json, .jsonl or .parquet file, a directory or a glob of them) rather
// than a corpus for Load (text or a nanoGPT .bin).
func IsRecordData(path string) bool {
	if fileKind(path) != "" {
		return true
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return true
	}
	return strings.ContainsAny(path, "*?[")
}

// ResolveFiles lists the data files that path stands for, in the order their
// records are read:
//
//   - a file: itself;
//   - a glob ("data/train-*.parquet"): the matches, sorted;
//   - a directory: its data files, or those of its data/ subdirectory (the
//     Hugging Face Hub layout, data/train-00000-of-00004.parquet), keeping
//     only the train split's files (names starting "train") when the
//     directory holds several splits.
//
// Shard names are zero-padded, so sorted order is shard order. All files
// must be of one kind (JSON, JSON Lines or Parquet).
func ResolveFiles(path string) ([]string, error) {
	var files []string
	st, statErr := os.Stat(path)
	switch {
	case statErr == nil && !st.IsDir():
		if fileKind(path) == "" {
			return nil, fmt.Errorf("data %s: not a .json, .jsonl or .parquet file", path)
		}
		return []string{path}, nil
	case statErr == nil && st.IsDir():
		dir := path
		if sub := filepath.Join(path, "data"); isDir(sub) && len(dataFiles(sub)) > 0 {
			dir = sub
		}
		files = dataFiles(dir)
		var train []string
		for _, f := range files {
			if strings.HasPrefix(strings.ToLower(filepath.Base(f)), "train") {
				train = append(train, f)
			}
		}
		if len(train) > 0 {
			files = train
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("data %s: the directory holds no .json, .jsonl or .parquet files (nor does its data/ subdirectory)", path)
		}
	case strings.ContainsAny(path, "*?["):
		m, err := filepath.Glob(path)
		if err != nil {
			return nil, fmt.Errorf("data %s: bad glob pattern: %w", path, err)
		}
		for _, f := range m {
			if fileKind(f) != "" && !isDir(f) {
				files = append(files, f)
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("data %s: the pattern matches no .json, .jsonl or .parquet files", path)
		}
	case errors.Is(statErr, os.ErrNotExist):
		return nil, fmt.Errorf("data %s: no such file or directory", path)
	default:
		return nil, fmt.Errorf("data %s: %w", path, statErr)
	}
	sort.Strings(files)
	for _, f := range files[1:] {
		if k0, k := fileKind(files[0]), fileKind(f); k != k0 {
			return nil, fmt.Errorf("data %s: mixes %s files (%s) and %s files (%s); give one kind", path, k0, files[0], k, f)
		}
	}
	return files, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func dataFiles(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && fileKind(e.Name()) != "" {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// ReadRecords calls fn with each record of the files, in order. It stops at
// the first error, its own or fn's.
func ReadRecords(files []string, fn func(Record) error) error {
	for _, f := range files {
		var err error
		switch fileKind(f) {
		case kindJSON:
			err = readJSON(f, fn)
		case kindJSONL:
			err = readJSONL(f, fn)
		case kindParquet:
			err = readParquet(f, fn)
		default:
			err = fmt.Errorf("data %s: not a .json, .jsonl or .parquet file", f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readJSON reads a JSON file: an array of records (LLaMA-Factory's
// alpaca_en_demo.json), or JSON Lines under a .json name, which Hugging
// Face's json loader also accepts.
func readJSON(path string, fn func(Record) error) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("data %s: %w", path, err)
	}
	raw = bytes.TrimPrefix(raw, []byte("\ufeff")) // a byte-order mark, on line 1
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 {
		return fmt.Errorf("data %s: the file is empty; it should hold a JSON array of records", path)
	}
	if trimmed[0] == '{' {
		if err := oneObjectFile(path, trimmed); err != nil {
			return err
		}
		return readJSONLines(path, bytes.NewReader(raw), fn)
	}
	if trimmed[0] != '[' {
		return fmt.Errorf("data %s: %s; a .json data file holds an array of records ([{...}, ...]) or one record per line",
			path, jsonSyntaxAt(raw, len(raw)-len(trimmed), "expected '[' or '{'"))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // the '['
		return fmt.Errorf("data %s: %w", path, err)
	}
	n := 0
	for i := 0; dec.More(); i++ {
		n++
		start := int(dec.InputOffset())
		var msg json.RawMessage
		if err := dec.Decode(&msg); err != nil {
			return fmt.Errorf("data %s: record %d: %s; fix the JSON", path, i, jsonError(raw, start, err))
		}
		// The decoder has consumed the separator before the record, so
		// the record itself starts at its first non-blank byte.
		start += bytes.IndexFunc(raw[start:], func(r rune) bool { return !strings.ContainsRune(", \t\r\n", r) })
		loc := Location{File: path, Index: i, Line: lineAt(raw, start)}
		rec, err := decodeRecord(loc, msg)
		if err != nil {
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the ']'
		return fmt.Errorf("data %s: %s; the array of records is not closed with ']'", path, jsonError(raw, int(dec.InputOffset()), err))
	}
	if n == 0 {
		return fmt.Errorf("data %s: the file holds an empty array, no records", path)
	}
	return nil
}

// oneObjectFile refuses a .json file that is a single object spread over
// several lines (pretty-printed): neither an array of records nor JSON
// Lines. Such files usually keep their records under a key, which the
// message names.
func oneObjectFile(path string, trimmed []byte) error {
	body := bytes.TrimRight(trimmed, " \t\r\n")
	if !bytes.Contains(body, []byte{'\n'}) || !json.Valid(body) {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	hint := ""
	for _, k := range sortedKeys(obj) {
		if v := bytes.TrimSpace(obj[k]); len(v) > 0 && v[0] == '[' {
			hint = fmt.Sprintf(" (its records seem to be under %q: save that array alone)", k)
			break
		}
	}
	return fmt.Errorf("data %s: the file is one JSON object over several lines, not records; a .json data file holds "+
		"an array of records ([{...}, ...]) or one record per line%s", path, hint)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readJSONL reads a JSON Lines file: one record per line; blank lines are
// skipped.
func readJSONL(path string, fn func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data %s: %w", path, err)
	}
	defer f.Close()
	return readJSONLines(path, f, fn)
}

func readJSONLines(path string, r io.Reader, fn func(Record) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	n := 0
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("data %s: line %d: %w", path, line, err)
		}
		if s := bytes.TrimSpace(b); len(s) > 0 {
			if line == 1 {
				s = bytes.TrimPrefix(s, []byte("\ufeff"))
			}
			rec, derr := decodeRecord(Location{File: path, Index: n, Line: line}, s)
			if derr != nil {
				return derr
			}
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
			n++
		}
		if err == io.EOF {
			break
		}
	}
	if n == 0 {
		return fmt.Errorf("data %s: the file is empty; JSON Lines data holds one record ({...}) per line", path)
	}
	return nil
}

// decodeRecord decodes one record's JSON, which must be an object in valid
// UTF-8 (Go's decoder would silently turn bad bytes into U+FFFD).
func decodeRecord(loc Location, msg []byte) (Record, error) {
	if !utf8.Valid(msg) {
		off := 0
		for off < len(msg) {
			r, size := utf8.DecodeRune(msg[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return Record{}, fmt.Errorf("%s: invalid UTF-8 (byte %#x at byte %d of the record); re-encode the file as UTF-8",
			loc, msg[off], off)
	}
	var fields map[string]any
	if err := json.Unmarshal(msg, &fields); err != nil || fields == nil {
		what := "not a JSON object"
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				what = fmt.Sprintf("invalid JSON at byte %d of the record: %v", se.Offset, err)
			} else {
				what = err.Error()
			}
			if len(msg) > 0 && msg[0] != '{' {
				what = "not a JSON object (records are {\"field\": value, ...})"
			}
		}
		return Record{}, fmt.Errorf("%s: %s; fix the JSON", loc, what)
	}
	return Record{Loc: loc, Fields: fields}, nil
}

// lineAt is the 1-based line of byte offset off.
func lineAt(raw []byte, off int) int {
	off = min(max(off, 0), len(raw))
	return bytes.Count(raw[:off], []byte{'\n'}) + 1
}

// jsonError names where a decode error happened in raw.
func jsonError(raw []byte, start int, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return jsonSyntaxAt(raw, int(se.Offset), err.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Sprintf("the file ends inside the JSON (started on line %d)", lineAt(raw, start))
	}
	return fmt.Sprintf("line %d: %v", lineAt(raw, start), err)
}

func jsonSyntaxAt(raw []byte, off int, msg string) string {
	return fmt.Sprintf("line %d: %s", lineAt(raw, off), msg)
}
