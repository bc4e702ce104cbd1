package ptfile

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"testing"
)

// small is a two-storage checkpoint (archive "ckpt") for corruption tests.
func small(t testing.TB) []byte {
	root := NewDict()
	root.Set("a", FromFloat32([]int64{2, 2}, []float32{1, 2, 3, 4}))
	root.Set("b", FromBits16(BFloat16, []int64{3}, []uint16{1, 2, 3}))
	var buf bytes.Buffer
	if err := Encode(&buf, "ckpt", root); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type entry struct {
	name string
	data []byte
}

// zipOf writes entries with correct CRCs, so that only the defect a test
// puts in is there.
func zipOf(t testing.TB, entries ...entry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: e.name, Method: zip.Store, CRC32: crc32.ChecksumIEEE(e.data),
			CompressedSize64: uint64(len(e.data)), UncompressedSize64: uint64(len(e.data))})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// entriesOf lists an archive's entries.
func entriesOf(t testing.TB, b []byte) []entry {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		var d bytes.Buffer
		d.ReadFrom(rc)
		rc.Close()
		out = append(out, entry{zf.Name, d.Bytes()})
	}
	return out
}

func edit(t testing.TB, b []byte, fn func(es []entry) []entry) []byte {
	return zipOf(t, fn(entriesOf(t, b))...)
}

func wantError(t *testing.T, what string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not say %q", what, err, s)
		}
	}
}

// TestTruncatedFiles cuts a checkpoint at every length: each is an error
// naming the file, never a panic.
func TestTruncatedFiles(t *testing.T) {
	b := small(t)
	for n := range len(b) {
		_, err := ReadBytes(b[:n], "cut.pt", Options{})
		wantError(t, fmt.Sprintf("cut at %d", n), err, "cut.pt")
	}
}

// TestFlippedBytes flips one byte in every entry's payload: the CRC check
// catches it and the error names the entry.
func TestFlippedBytes(t *testing.T) {
	b := small(t)
	zr, _ := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	for _, zf := range zr.File {
		off, _ := zf.DataOffset()
		c := bytes.Clone(b)
		c[off] ^= 0x40
		_, err := ReadBytes(c, "flip.pt", Options{})
		wantError(t, zf.Name, err, "flip.pt", zf.Name, "checksum")
	}
}

func TestBrokenArchives(t *testing.T) {
	b := small(t)
	drop := func(name string) []byte {
		return edit(t, b, func(es []entry) []entry {
			var out []entry
			for _, e := range es {
				if e.name != name {
					out = append(out, e)
				}
			}
			return out
		})
	}
	replace := func(name string, data []byte) []byte {
		return edit(t, b, func(es []entry) []entry {
			for i := range es {
				if es[i].name == name {
					es[i].data = data
				}
			}
			return es
		})
	}
	add := func(name string, data []byte) []byte {
		return edit(t, b, func(es []entry) []entry { return append(es, entry{name, data}) })
	}
	pkl := entriesOf(t, b)[0].data
	// The view "a" is 4 float32s of storage "0"; make the storage 2 long.
	short := bytes.Replace(pkl, []byte("K\x04tQ"), []byte("K\x02tQ"), 1)
	if bytes.Equal(short, pkl) {
		t.Fatal("no storage numel 4 in the pickle")
	}
	cases := []struct {
		name string
		file []byte
		want []string
	}{
		{"missing storage", drop("ckpt/data/1"), []string{"storage entry ckpt/data/1 is missing"}},
		{"short storage", replace("ckpt/data/0", make([]byte, 12)), []string{"ckpt/data/0 holds 12 bytes", "4 float32 elements"}},
		{"view past storage", edit(t, b, func(es []entry) []entry {
			es[0].data, es[2].data = short, make([]byte, 8)
			return es
		}), []string{"ckpt/data.pkl", "shorter than the tensor view"}},
		{"no data.pkl", drop("ckpt/data.pkl"), []string{"no <archive>/data.pkl"}},
		{"second data.pkl", add("other/data.pkl", pkl), []string{"a second data.pkl"}},
		{"duplicate entry", add("ckpt/data/0", make([]byte, 16)), []string{"ckpt/data/0: duplicate"}},
		{"no version", drop("ckpt/version"), []string{"ckpt/version: missing"}},
		{"bad version", replace("ckpt/version", []byte("x")), []string{"format version"}},
		{"big-endian", replace("ckpt/byteorder", []byte("big")), []string{"only little-endian"}},
		{"TorchScript", add("ckpt/constants.pkl", nil), []string{"TorchScript"}},
		{"legacy format", []byte("\x80\x02\x8a\x0alZ\xa1\x4b\x1c\x3f\x09\x00\x00\x00"), []string{"legacy"}},
		{"not a zip", []byte("hello"), []string{"not a torch.save zip archive"}},
		{"garbage pickle", replace("ckpt/data.pkl", []byte("\x80\x02Zx")), []string{"ckpt/data.pkl", "offset 2", "unsupported opcode"}},
		{"pickle without STOP", replace("ckpt/data.pkl", pkl[:len(pkl)-1]), []string{"no STOP"}},
	}
	for _, c := range cases {
		_, err := ReadBytes(c.file, "bad.pt", Options{})
		wantError(t, c.name, err, append(c.want, "bad.pt")...)
	}
}

// fakeStorages resolves persistent ids without an archive, for pickle-level
// tests: every storage is zeros, at most 1<<16 elements.
func fakeStorages() func([]any) (*Storage, error) {
	byKey := map[string]*Storage{}
	return func(pid []any) (*Storage, error) {
		if len(pid) != 5 {
			return nil, errors.New("bad persistent id")
		}
		g, ok1 := pid[1].(*global)
		key, ok2 := pid[2].(string)
		n, ok3 := pid[4].(int64)
		if !ok1 || g.role != roleStorage || !ok2 || !ok3 || n < 0 || n > 1<<16 {
			return nil, errors.New("bad persistent id")
		}
		if s := byKey[key]; s != nil {
			if s.DType != g.dtype || s.Numel != n {
				return nil, errors.New("conflicting storage")
			}
			return s, nil
		}
		s := &Storage{DType: g.dtype, Numel: n, Key: key, Location: "cpu", Data: make([]byte, n*g.dtype.Size())}
		byKey[key] = s
		return s, nil
	}
}

func TestAllowList(t *testing.T) {
	gl := func(m, n string) string { return "c" + m + "\n" + n + "\n" }
	ns := "\x80\x02" + gl("argparse", "Namespace") + ")\x81}X\x02\x00\x00\x00lrG?\xb9\x99\x99\x99\x99\x99\x9asb."
	cases := []struct {
		name, pkl string
		opts      Options
		want      []string // substrings of the error; none: it must read
	}{
		{"os.system", "\x80\x02" + gl("os", "system") + "X\x02\x00\x00\x00lsR.", Options{}, []string{"class os.system is not allowed"}},
		{"DeepSpeed off", "\x80\x02" + gl("deepspeed.runtime.fp16.loss_scaler", "LossScaler") + ")\x81.", Options{}, []string{"LossScaler is not allowed"}},
		{"DeepSpeed on", "\x80\x02" + gl("deepspeed.runtime.fp16.loss_scaler", "LossScaler") + ")\x81.", dsOpts, nil},
		{"Namespace off", ns, Options{}, []string{"argparse.Namespace is not allowed"}},
		{"Namespace on", ns, Options{Classes: []string{"argparse.Namespace"}}, nil},
		{"getattr on torch.Size", "\x80\x02" + gl("__builtin__", "getattr") + gl("torch", "Size") + "X\x01\x00\x00\x00x\x86R.", Options{}, []string{"only read as an allow-listed class's member"}},
		{"calling a dtype", "\x80\x02" + gl("torch", "float32") + ")R.", Options{}, []string{"torch.float32 cannot be called"}},
		{"NEWOBJ of OrderedDict", "\x80\x02" + gl("collections", "OrderedDict") + ")\x81.", Options{}, []string{"only allow-listed classes are instantiated"}},
		{"storage as a value", "\x80\x02" + gl("torch", "FloatStorage") + ".", Options{}, []string{"torch.FloatStorage used as a value"}},
		{"persistent id not a storage", "\x80\x02X\x01\x00\x00\x00x\x85Q.", Options{}, []string{"bad persistent id"}},
	}
	for _, c := range cases {
		v, err := unpickle([]byte(c.pkl), newAllowList(c.opts), fakeStorages())
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if o, ok := v.(*Object); !ok || o.Kind != NewObject {
				t.Errorf("%s: read %#v", c.name, v)
			}
			continue
		}
		wantError(t, c.name, err, c.want...)
	}
	// Reading a file, the error names the class and the file, and the
	// option that would accept the class: in Go for Error, left out of
	// Message (for programs whose users cannot set Options).
	b := small(t)
	for _, c := range []struct{ pkl, option, hint string }{
		{"\x80\x02" + gl("os", "system") + ".", "Classes", `Options.Classes = []string{"os.system"}`},
		{"\x80\x02" + gl("deepspeed.runtime.fp16.loss_scaler", "LossScaler") + ")\x81.", "DeepSpeed", "Options.DeepSpeed"},
	} {
		bad := edit(t, b, func(es []entry) []entry {
			es[0].data = []byte(c.pkl)
			return es
		})
		_, err := ReadBytes(bad, "evil.pt", Options{})
		wantError(t, "file", err, "evil.pt", "ckpt/data.pkl", "is not allowed", c.hint)
		var pe *Error
		if !errors.As(err, &pe) || pe.Option != c.option || strings.Contains(pe.Message(), "Options") || !strings.Contains(pe.Message(), "evil.pt: ckpt/data.pkl") {
			t.Errorf("%s: %#v", c.option, pe)
		}
	}
}

// TestHostilePickles: malformed and hostile programs are errors, never
// panics, hangs or huge allocations.
func TestHostilePickles(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("]", n) + strings.Repeat("a", n-1) + "." }
	laughs := "\x80\x02]"
	for range 40 { // each level is a list holding the previous level twice
		laughs += "q\x00]h\x00h\x00\x86a"
	}
	laughs += "."
	cases := []struct{ name, pkl, want string }{
		{"empty", "", "empty pickle"},
		{"list inside itself", "\x80\x02]q\x00h\x00a.", "cycle"},
		{"dict inside itself", "\x80\x02}q\x00X\x01\x00\x00\x00kh\x00s.", "cycle"},
		{"billion laughs", laughs, "expands to more than"},
		{"deep nesting", nest(5000), "nested deeper"},
		{"stack underflow", "\x80\x02a.", "stack underflow"},
		{"pop below MARK", "\x80\x02N(\x85.", "stack underflow"},
		{"odd SETITEMS", "\x80\x02}(K\x01u.", "odd number"},
		{"huge BINUNICODE8", "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", "truncated"},
		{"huge BINUNICODE", "\x80\x02X\xff\xff\xff\xff", "truncated"},
		{"huge FRAME", "\x80\x04\x95\xff\xff\xff\xff\xff\xff\x00\x00N.", "frame"},
		{"negative LONG4", "\x80\x02\x8b\xff\xff\xff\xff.", "negative"},
		{"undefined memo", "\x80\x02h\x07.", "memo key 7"},
		{"unhashable key", "\x80\x02}]K\x01s.", "dict key of type list"},
		{"append to a dict", "\x80\x02}K\x01a.", "append to a dict"},
		{"BUILD on a list", "\x80\x02]}b.", "BUILD on a list"},
		{"text protocol", "(lp0\n.", "unsupported opcode"},
		{"no STOP", "\x80\x02N", "no STOP"},
		{"view past storage", "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x03\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR.", "shorter than the tensor view"},
		{"negative stride", "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85J\xff\xff\xff\xff\x85\x89ccollections\nOrderedDict\n)RtR.", "negative"},
	}
	for _, c := range cases {
		_, err := unpickle([]byte(c.pkl), newAllowList(dsOpts), fakeStorages())
		wantError(t, c.name, err, c.want)
	}
}

// TestProtocol4 reads a protocol 4 pickle torch.save wrote (FRAME,
// SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, EMPTY_SET/ADDITEMS,
// SHORT_BINBYTES): testdata/torch_p4_data.pkl, see testdata/README.md.
func TestProtocol4(t *testing.T) {
	pkl, err := os.ReadFile("testdata/torch_p4_data.pkl")
	if err != nil {
		t.Fatal(err)
	}
	v, err := unpickle(pkl, newAllowList(dsOpts), fakeStorages())
	if err != nil {
		t.Fatal(err)
	}
	w, _ := Get[*Tensor](v, "w")
	wt, _ := Get[*Tensor](v, "wt")
	b, _ := Get[*Tensor](v, "b")
	if w == nil || wt == nil || b == nil || w.Storage != wt.Storage || w.Storage != b.Storage || b.Offset != 4 ||
		fmt.Sprint(wt.Stride) != "[1 2]" || w.DType != BFloat16 {
		t.Errorf("views: %v %v %v", w, wt, b)
	}
	for path, want := range map[string]string{"s": "[1 2]", "bytes": "[120 121]", "stage": "deepspeed.runtime.zero.config.ZeroStageEnum.gradients",
		"size": "[2]", "dt": "float32", "big": "1180591620717411303424", "f": "0.5", "scaler.cur_scale": "1"} {
		x, err := Lookup(v, path)
		if got := fmt.Sprint(x); err != nil || got != want {
			t.Errorf("%s = %s (%v), want %s", path, got, err, want)
		}
	}
	sd, _ := Get[*Dict](v, "sd")
	if sd == nil || !sd.OrderedDict || sd.Attrs == nil {
		t.Errorf("state dict %v", sd)
	}
}
