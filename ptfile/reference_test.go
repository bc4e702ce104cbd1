package ptfile

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The DeepSpeed 0.14.5 reference runs (real checkpoints written by
// engine.save_checkpoint, plus checkpoint.json: every file, key, shape and
// dtype, as the harness's describe_ckpt.py recorded them with torch.load).
// Regenerate with ../shared/reference/harness (run_all.sh).
const referenceDir = "../../shared/reference/deepspeed-0.14.5-cpu"

var dsOpts = Options{DeepSpeed: true}

// matchRecord checks v against one describe_ckpt.py node.
func matchRecord(n *jnode, v any, path string) error {
	typ := n.str("type")
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: recorded %s: %s", pathName(path), typ, fmt.Sprintf(format, args...))
	}
	num := func(key string) string {
		if c := n.get(key); c != nil {
			return fmt.Sprint(c.val)
		}
		return ""
	}
	switch {
	case typ == "tensor":
		t, ok := v.(*Tensor)
		if !ok {
			return fail("got %s", TypeName(v))
		}
		var shape []string
		for _, d := range n.get("shape").arr {
			shape = append(shape, fmt.Sprint(d.val))
		}
		if t.DType.String() != n.str("dtype") || fmt.Sprint(t.Shape) != "["+strings.Join(shape, " ")+"]" ||
			strconv.FormatInt(t.Numel(), 10) != num("numel") {
			return fail("got %s", t)
		}
		if c := n.get("value"); c != nil {
			want, _ := strconv.ParseFloat(fmt.Sprint(c.val), 64)
			var got float64
			if xs, err := t.Float32s(); err == nil {
				got = float64(xs[0])
			} else if is, err := t.Int64s(); err == nil {
				got = float64(is[0])
			}
			if got != want {
				return fail("value %v, want %v", got, want)
			}
		}
	case typ == "dict" || typ == "OrderedDict":
		d, ok := v.(*Dict)
		if !ok || d.OrderedDict != (typ == "OrderedDict") || strconv.Itoa(d.Len()) != num("len") {
			return fail("got %s of %v", TypeName(v), v)
		}
		items := n.get("items").obj
		for i, k := range d.Keys() {
			if ks := fmt.Sprint(k); ks != items[i].key {
				return fail("key %d is %q, recorded %q", i, ks, items[i].key)
			}
			x, _ := d.Get(k)
			if err := matchRecord(items[i].val, x, JoinPath(path, k)); err != nil {
				return err
			}
		}
	case typ == "list" || typ == "tuple":
		var s []any
		switch x := v.(type) {
		case List:
			s = x
		case Tuple:
			s = x
		}
		if TypeName(v) != typ || strconv.Itoa(len(s)) != num("len") {
			return fail("got %s", TypeName(v))
		}
		if items := n.get("items"); items != nil {
			for i, c := range items.arr {
				if err := matchRecord(c, s[i], JoinPath(path, i)); err != nil {
					return err
				}
			}
		} else {
			if err := matchRecord(n.get("first_items").arr[0], s[0], JoinPath(path, 0)); err != nil {
				return err
			}
			if err := matchRecord(n.get("last_item"), s[len(s)-1], JoinPath(path, len(s)-1)); err != nil {
				return err
			}
		}
	case typ == "float":
		want, _ := strconv.ParseFloat(num("value"), 64)
		if f, ok := v.(float64); !ok || f != want {
			return fail("got %v", v)
		}
	case typ == "int":
		if fmt.Sprint(v) != num("value") {
			return fail("got %v", v)
		}
	case typ == "bool":
		if fmt.Sprint(v) != num("value") {
			return fail("got %v", v)
		}
	case typ == "NoneType":
		if v != nil {
			return fail("got %v", v)
		}
	case typ == "str":
		s, ok := v.(string)
		want := n.str("value")
		if !ok || (s != want && !(len(s) > 300 && strings.HasSuffix(want, "...") && strings.HasPrefix(s, want[:300]))) {
			return fail("got %q", v)
		}
	case typ == "torch.Size":
		var want []string
		for _, d := range n.get("value").arr {
			want = append(want, fmt.Sprint(d.val))
		}
		if s, ok := v.(Size); !ok || fmt.Sprint([]int64(s)) != "["+strings.Join(want, " ")+"]" {
			return fail("got %v", v)
		}
	case typ == "builtins.set":
		if s, ok := v.(Set); !ok || n.str("repr") != "set()" || len(s) != 0 {
			return fail("got %v", v)
		}
	case strings.HasPrefix(typ, "enum "):
		o, ok := v.(*Object)
		if !ok || o.Kind != EnumMember || "enum "+o.Class() != typ || !strings.Contains(n.str("value"), "."+o.Attr+":") {
			return fail("got %v", v)
		}
	case strings.HasPrefix(typ, "dataclass ") || strings.HasPrefix(typ, "object "):
		o, ok := v.(*Object)
		if !ok || o.Kind != NewObject || !strings.HasSuffix(typ, " "+o.Class()) {
			return fail("got %v", v)
		}
		fields := n.get("fields")
		if fields == nil {
			fields = n.get("attrs")
		}
		st, _ := o.State.(*Dict)
		if st == nil || st.Len() != len(fields.obj) {
			return fail("state %v", o.State)
		}
		for _, f := range fields.obj {
			x, ok := st.Get(f.key)
			if !ok {
				return fail("no field %s", f.key)
			}
			if err := matchRecord(f.val, x, JoinPath(path, f.key)); err != nil {
				return err
			}
		}
	default:
		return fail("type not handled by the test")
	}
	return nil
}

func parseRecordFile(t *testing.T, path string) *jnode {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseOrdered(json.NewDecoder(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// TestTestdataMatchesDeepSpeedRecord reads the real DeepSpeed files kept in
// testdata and checks every key, type, shape, dtype and scalar against what
// torch.load saw (testdata/checkpoint_excerpt.json).
func TestTestdataMatchesDeepSpeedRecord(t *testing.T) {
	rec := parseRecordFile(t, "testdata/checkpoint_excerpt.json")
	for _, f := range rec.obj {
		v, err := Read(filepath.Join("testdata", f.key), dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		if err := matchRecord(f.val.get("content"), v, ""); err != nil {
			t.Errorf("%s: %v", f.key, err)
		}
		// The matcher itself notices a wrong shape.
		Walk(v, func(_ string, x any) error {
			if tt, ok := x.(*Tensor); ok && len(tt.Shape) > 0 {
				tt.Shape[0]++
				if matchRecord(f.val.get("content"), v, "") == nil {
					t.Errorf("%s: a changed shape still matches", f.key)
				}
				tt.Shape[0]--
				return errStop
			}
			return nil
		})
	}
}

var errStop = errors.New("stop")

// TestReferenceCheckpoints reads every .pt of every DeepSpeed reference run
// and checks the described tag's files against checkpoint.json.
func TestReferenceCheckpoints(t *testing.T) {
	records, _ := filepath.Glob(filepath.Join(referenceDir, "*", "*", "checkpoint.json"))
	if len(records) == 0 {
		t.Skipf("no DeepSpeed reference runs under %s", referenceDir)
	}
	pts, _ := filepath.Glob(filepath.Join(referenceDir, "*", "*", "ckpt", "global_step*", "*.pt"))
	classes := map[string]int{}
	for _, p := range pts {
		v, err := Read(p, dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		Walk(v, func(_ string, x any) error {
			if o, ok := x.(*Object); ok {
				classes[o.Class()]++
			}
			return nil
		})
	}
	checked := 0
	for _, recPath := range records {
		run := filepath.Dir(recPath)
		if _, err := os.Stat(filepath.Join(run, "ckpt")); err != nil {
			continue
		}
		rec := parseRecordFile(t, recPath)
		tag := rec.str("described_tag")
		for _, f := range rec.get("files").arr {
			rel, content := f.str("path"), f.get("content")
			if content == nil || !strings.HasPrefix(rel, tag+"/") {
				continue
			}
			v, err := Read(filepath.Join(run, "ckpt", rel), dsOpts)
			if err != nil {
				t.Fatal(err)
			}
			if err := matchRecord(content, v, ""); err != nil {
				t.Errorf("%s/%s: %v", run, rel, err)
			}
			checked++
		}
	}
	t.Logf("read %d DeepSpeed files, %d checked against checkpoint.json; objects by class: %v", len(pts), checked, classes)
}

// TestRoundTrip reads real DeepSpeed files, writes them back and reads the
// result: the values, dtypes, views and storage sharing are identical, the
// payloads 64-byte aligned and the layout torch's.
func TestRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.pt")
	ref, _ := filepath.Glob(filepath.Join(referenceDir, "*", "*", "ckpt", "global_step10", "*.pt"))
	if testing.Short() {
		ref = nil
	}
	for _, path := range append(files, ref...) {
		f, err := Open(path, dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.LoadAll(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var buf bytes.Buffer
		if err := Encode(&buf, f.Archive, f.Root); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		g, err := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "rewritten "+path, dsOpts)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.LoadAll(); err != nil {
			t.Fatal(err)
		}
		if a, b := describe(f.Root), describe(g.Root); a != b {
			t.Fatalf("%s: round trip differs %s", path, firstDiff(a, b))
		}
		if len(g.Storages) != len(f.Storages) || g.Archive != f.Archive {
			t.Errorf("%s: %d storages in archive %s, rewritten %d in %s", path, len(f.Storages), f.Archive, len(g.Storages), g.Archive)
		}
		checkLayout(t, buf.Bytes(), f.Archive, len(f.Storages))
	}
}

// checkLayout checks torch's layout: entries in torch's order, stored, with
// payloads at multiples of 64.
func checkLayout(t *testing.T, b []byte, archive string, storages int) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"data.pkl", "byteorder"}
	for i := range storages {
		want = append(want, fmt.Sprintf("data/%d", i))
	}
	want = append(want, "version")
	if len(zr.File) != len(want) {
		t.Fatalf("%d entries, want %v", len(zr.File), want)
	}
	for i, zf := range zr.File {
		off, err := zf.DataOffset()
		if err != nil || zf.Name != archive+"/"+want[i] || zf.Method != zip.Store || off%64 != 0 {
			t.Errorf("entry %d: %s method %d at %d (%v); want %s/%s stored at a multiple of 64", i, zf.Name, zf.Method, off, err, archive, want[i])
		}
	}
}

// TestWriteIsCrashSafe checks Write's temporary file and rename: no .tmp
// is left, a failed write leaves the old file, and errors name the file.
func TestWriteIsCrashSafe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mp_rank_00_model_states.pt")
	root := NewDict()
	root.Set("w", FromFloat32([]int64{2}, []float32{1, 2}))
	if err := Write(path, root); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	bad := NewDict()
	bad.Set("w", &Tensor{DType: Float32, Shape: []int64{3}, Stride: []int64{1},
		Storage: &Storage{DType: Float32, Numel: 2, Data: make([]byte, 8)}})
	err := Write(path, bad)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "w: storage") {
		t.Fatalf("writing a view past its storage: %v", err)
	}
	now, _ := os.ReadFile(path)
	if !bytes.Equal(old, now) {
		t.Error("a failed write changed the file")
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	if err := Write(filepath.Join(dir, "missing", "x.pt"), root); err == nil || !strings.Contains(err.Error(), "missing/x.pt") {
		t.Errorf("write into a missing directory: %v", err)
	}
	v, err := Read(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := Get[*Tensor](v, "w"); w == nil || w.Storage.Key != "0" {
		t.Errorf("read back %v", v)
	}
}
