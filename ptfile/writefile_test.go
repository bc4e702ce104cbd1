package ptfile

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/half"
)

// legacyWriteZip is writeZip as it was before storages could stream from
// a Source (git 0bbbf5f, ptfile/write.go), kept verbatim as the oracle
// that WriteFile's bytes are compared with: checkpoints written by
// streaming must be byte for byte the files dszero wrote before.
func legacyWriteZip(w io.Writer, archive string, pkl []byte, storages []*Storage) error {
	if archive == "" || strings.ContainsAny(archive, "/\\") {
		return fmt.Errorf("archive name %q: want one directory name", archive)
	}
	zw := zip.NewWriter(w)
	var off uint64 // bytes written so far; the local headers are ours to count
	add := func(name string, data []byte) error {
		name = archive + "/" + name
		start := off + 30 + uint64(len(name))
		var extra []byte
		if pad := (align - start%align) % align; pad != 0 {
			if pad < 4 {
				pad += align
			}
			extra = make([]byte, pad)
			copy(extra, "FB")
			binary.LittleEndian.PutUint16(extra[2:], uint16(pad-4))
		}
		fw, err := zw.CreateRaw(&zip.FileHeader{
			Name: name, Method: zip.Store, ReaderVersion: 20, CreatorVersion: 20, Extra: extra,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
		})
		if err != nil {
			return err
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
		off = start + uint64(len(extra)) + uint64(len(data))
		return nil
	}
	if err := add("data.pkl", pkl); err != nil {
		return err
	}
	if err := add("byteorder", []byte("little")); err != nil {
		return err
	}
	for i, s := range storages {
		if err := add(fmt.Sprintf("data/%d", i), s.Data); err != nil {
			return err
		}
	}
	if err := add("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.Close()
}

// legacyBytes is the file the legacy writer makes of root, whose
// storages must be loaded.
func legacyBytes(t *testing.T, archive string, root any) []byte {
	t.Helper()
	pkl, storages, err := marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := legacyWriteZip(&buf, archive, pkl, storages); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// byteSource is a Source over bytes that the writer must read piece by
// piece (it is no viewer).
type byteSource struct {
	b     []byte
	reads int
}

func (s *byteSource) ReadAt(p []byte, off int64) (int, error) {
	s.reads++
	return copy(p, s.b[off:]), nil
}

// sourced returns a copy of the tree's tensors over new storages whose
// bytes come from sources (shared storages stay shared): f32 ones as
// Float32Source over their values when views is set, every other as a
// byteSource.
func sourced(t *testing.T, root any, views bool) any {
	t.Helper()
	seen := map[*Storage]*Storage{}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case *Tensor:
			st, ok := seen[x.Storage]
			if !ok {
				st = &Storage{DType: x.Storage.DType, Numel: x.Storage.Numel, Location: x.Storage.Location}
				if views && st.DType == Float32 {
					f := make([]float32, st.Numel)
					for i := range f {
						f[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Storage.Data[4*i:]))
					}
					st.Src = Float32Source(f)
				} else {
					st.Src = &byteSource{b: append([]byte(nil), x.Storage.Data...)}
				}
				seen[x.Storage] = st
			}
			c := *x
			c.Storage = st
			return &c
		case *Dict:
			d := &Dict{OrderedDict: x.OrderedDict, Attrs: x.Attrs}
			for k, e := range x.All() {
				d.Set(k, walk(e))
			}
			return d
		case List:
			out := make(List, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		case Tuple:
			out := make(Tuple, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		}
		return v
	}
	return walk(root)
}

// bigTree is a tree with storages larger than a source piece and than
// the I/O buffer's halves, in float32, bfloat16 and int64, and a view
// sharing a storage.
func bigTree() (withData, withSources any) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := make([]float32, 3*sourcePiece/4+123) // 3 pieces and a bit
	for i := range f {
		f[i] = rng.Float32()*2 - 1
	}
	bits := make([]uint16, len(f))
	half.F32ToBF16(bits, f)
	flat := FromFloat32([]int64{int64(len(f))}, f)
	view, _ := flat.View(7, []int64{5, 3}, []int64{3, 1})
	bf := FromBits16(BFloat16, []int64{int64(len(f))}, bits)
	ids := FromInt64(Int64, []int64{3}, []int64{1, -2, 3})
	withData = DictOf("flat", flat, "view", view, "bf16", bf, "ids", ids, "step", int64(4))
	sflat := ViewFloat32([]int64{int64(len(f))}, f)
	sview, _ := sflat.View(7, []int64{5, 3}, []int64{3, 1})
	withSources = DictOf("flat", sflat, "view", sview, "bf16", NewSourceTensor(BFloat16, []int64{int64(len(f))}, Half16Source(BFloat16, f)),
		"ids", ids, "step", int64(4))
	return withData, withSources
}

func TestWriteFileMatchesLegacy(t *testing.T) {
	type tc struct {
		name string
		data any // storages loaded: what the legacy writer is given
		srcs any // the same values, as WriteFile is given them
		opts WriteOptions
	}
	var cases []tc
	for _, name := range []string{"mlp_z2_bf16_mp_rank_00_model_states.pt", "mlp_z2_fp32_zero_pp_rank_1_mp_rank_00_optim_states.pt", "mlp_z3_bf16_zero_pp_rank_0_mp_rank_00_model_states.pt"} {
		root, err := Read(filepath.Join("testdata", name), Options{DeepSpeed: true})
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases,
			tc{name + "/loaded", root, root, WriteOptions{}},
			tc{name + "/sources", root, sourced(t, root, false), WriteOptions{}},
			tc{name + "/views,small buffer", root, sourced(t, root, true), WriteOptions{BufferSize: 1}},
			tc{name + "/no direct", root, sourced(t, root, true), WriteOptions{NoDirect: true}})
	}
	data, srcs := bigTree()
	cases = append(cases,
		tc{"big/sources", data, srcs, WriteOptions{}},
		tc{"big/sources,32 KiB buffer", data, srcs, WriteOptions{BufferSize: 32 << 10}},
		tc{"big/byte sources,no direct", data, sourced(t, data, false), WriteOptions{NoDirect: true}})
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, "mp_rank_00_model_states.pt")
			want := legacyBytes(t, ArchiveName(p), c.data)
			w, err := WriteFile(p, c.srcs, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("WriteFile wrote %d bytes that differ from the legacy writer's %d", len(got), len(want))
			}
			if w.Bytes != int64(len(got)) || w.SHA256 != sha256.Sum256(got) {
				t.Errorf("Written says %d bytes, sha256 %x; the file has %d, %x", w.Bytes, w.SHA256, len(got), sha256.Sum256(got))
			}
			if c.opts.NoDirect && w.Direct {
				t.Error("NoDirect wrote with O_DIRECT")
			}
			if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
				t.Errorf("the temporary file is left: %v", err)
			}
		})
	}
}

// TestWriteFileDirect: on a filesystem that takes O_DIRECT (ext4 under
// the test's temporary directory), the payload is written with it; on
// one that refuses it (tmpfs, /dev/shm), the file is the same bytes.
func TestWriteFileDirect(t *testing.T) {
	data, srcs := bigTree()
	want := legacyBytes(t, "x", data)
	for _, dir := range []string{t.TempDir(), "/dev/shm"} {
		if _, err := os.Stat(dir); err != nil {
			t.Logf("%s: %v", dir, err)
			continue
		}
		d, err := os.MkdirTemp(dir, "ptfile")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(d)
		p := filepath.Join(d, "x.pt")
		w, err := WriteFile(p, srcs, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the file differs from the legacy writer's", dir)
		}
		probe, direct, err := openForWrite(filepath.Join(d, "probe"), true)
		if err != nil {
			t.Fatal(err)
		}
		probe.Close()
		if w.Direct != direct {
			t.Errorf("%s takes O_DIRECT: %v; the file was written with it: %v", dir, direct, w.Direct)
		}
		t.Logf("%s: O_DIRECT %v", dir, w.Direct)
	}
}

// A source's error fails the write, names the storage, and leaves no file.
func TestWriteFileSourceError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.pt")
	bad := NewSourceTensor(Float32, []int64{4}, failing{})
	_, err := WriteFile(p, DictOf("w", bad), WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "data/0") || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "disk gone") {
		t.Fatalf("err = %v, want one naming %s, data/0 and the source's error", err, p)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

type failing struct{}

func (failing) ReadAt([]byte, int64) (int, error) { return 0, fmt.Errorf("disk gone") }

// Half16Source rounds as half's converters do, at every offset the
// writer may ask for.
func TestHalf16Source(t *testing.T) {
	v := []float32{0, 1, -1.5, 3.1415926, 65504, 1e-8, float32(math.Inf(1)), 70000, -2.7182817}
	for _, dt := range []DType{BFloat16, Float16} {
		want := make([]uint16, len(v))
		if dt == BFloat16 {
			half.F32ToBF16(want, v)
		} else {
			half.F32ToF16(want, v)
		}
		s := Half16Source(dt, v)
		for off := 0; off < len(v); off++ {
			p := make([]byte, 2*(len(v)-off))
			if _, err := s.ReadAt(p, int64(2*off)); err != nil {
				t.Fatal(err)
			}
			for i := range len(v) - off {
				if got := binary.LittleEndian.Uint16(p[2*i:]); got != want[off+i] {
					t.Fatalf("%s element %d from offset %d: %04x, want %04x", dt, off+i, off, got, want[off+i])
				}
			}
		}
		if _, err := s.ReadAt(make([]byte, 3), 0); err == nil {
			t.Error("an odd read of a 16-bit source succeeded")
		}
	}
}

func TestPaddedSource(t *testing.T) {
	s := PaddedSource(Float32Source([]float32{1, 2}), 8, 16)
	p := make([]byte, 12)
	if _, err := s.ReadAt(p, 4); err != nil {
		t.Fatal(err)
	}
	if math.Float32frombits(binary.LittleEndian.Uint32(p)) != 2 || !bytes.Equal(p[4:], make([]byte, 8)) {
		t.Errorf("got % x", p)
	}
	if _, err := s.ReadAt(p, 8); err == nil {
		t.Error("a read past the end succeeded")
	}
}

// One Writer writes file after file through the same buffers.
func TestWriterReuse(t *testing.T) {
	data, srcs := bigTree()
	small, err := Read(filepath.Join("testdata", "mlp_z3_bf16_zero_pp_rank_0_mp_rank_00_model_states.pt"), Options{DeepSpeed: true})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(WriteOptions{BufferSize: 1 << 20})
	dir := t.TempDir()
	for i, c := range []struct{ data, srcs any }{{data, srcs}, {small, sourced(t, small, true)}, {data, sourced(t, data, false)}} {
		p := filepath.Join(dir, fmt.Sprintf("f%d.pt", i))
		if _, err := w.WriteFile(p, c.srcs); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, legacyBytes(t, ArchiveName(p), c.data)) {
			t.Fatalf("file %d differs from the legacy writer's", i)
		}
	}
}

// A write that fails in the writer goroutine reaches the caller: a later
// Write returns it, close returns it too, writes nothing after it and
// does not hang however many blocks were queued behind it.
func TestOutWriterError(t *testing.T) {
	for _, direct := range []bool{false, true} {
		buf := alignedBuffer(WriteOptions{BufferSize: 1}.bufferSize())
		o, err := createOut(filepath.Join(t.TempDir(), "f"), buf, direct)
		if err != nil {
			t.Fatal(err)
		}
		o.f.Close() // every write from now on fails
		chunk := make([]byte, 1000)
		var werr error
		for i := 0; i < 1000 && werr == nil; i++ {
			_, werr = o.Write(chunk)
		}
		if !errors.Is(werr, os.ErrClosed) {
			t.Errorf("direct %v: 1 MB of writes to a closed file returned %v; want the writer's error (file already closed)", direct, werr)
		}
		cerr := o.close()
		if !errors.Is(cerr, os.ErrClosed) {
			t.Errorf("direct %v: close returned %v; want the writer's error (file already closed)", direct, cerr)
		}
		if _, err := o.Write(chunk); err == nil {
			t.Errorf("direct %v: a Write after the failure succeeded", direct)
		}
	}
}
