package nccl

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/cuda/driver"
)

// The ABI tests load stub libraries built from testdata/stub_nccl.c with
// the machine's C compiler (skipped without one) through the real loader,
// call every wrapper and read back what the C side received: every
// argument in its place and width, the 128-byte id passed by value to
// ncclCommInitRankConfig (the hand-laid System V call), the config
// struct's fields, the PreMulSum scalar's bytes, and the results and
// error strings coming back.

// buildStub compiles the stub with extra cc flags into dir/name.
func buildStub(t *testing.T, name string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stub libnccl")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out, filepath.Join("testdata", "stub_nccl.c")}, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// stub is a loaded stub and its recorder.
type stub struct {
	t   *testing.T
	lib *binding
	h   uintptr
}

func loadStub(t *testing.T, flags ...string) stub {
	t.Helper()
	path := buildStub(t, "libnccl.so.2", flags...)
	l, err := loadFrom([]driver.LibCandidate{{Path: path, Source: "test", Exists: true}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) // the same handle: dlopen counts references
	if err != nil {
		t.Fatal(err)
	}
	return stub{t: t, lib: l.Lib.(*binding), h: h}
}

func (s stub) fn(name string) uintptr {
	p, err := purego.Dlsym(s.h, name)
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// recorded is what the stub saw in the last call.
type recorded struct {
	name   string
	args   [8]uint64
	id     UniqueID
	cfg    configC
	scalar [8]byte
}

func (s stub) last() recorded {
	var r recorded
	var name [64]byte
	purego.SyscallN(s.fn("stub_last"), uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&r.args[0])),
		uintptr(unsafe.Pointer(&r.id[0])), uintptr(unsafe.Pointer(&r.cfg)), uintptr(unsafe.Pointer(&r.scalar[0])))
	r.name = cString(uintptr(unsafe.Pointer(&name[0])))
	return r
}

func (s stub) fail(name string, code Result) {
	b := append([]byte(name), 0)
	purego.SyscallN(s.fn("stub_fail"), uintptr(unsafe.Pointer(&b[0])), uintptr(code))
}

func (s stub) reset() { purego.SyscallN(s.fn("stub_reset")) }

func testID() UniqueID {
	var id UniqueID
	for i := range id {
		id[i] = byte(255 - i)
	}
	return id
}

// wantConfig is the config every communicator gets: non-blocking, the
// rest left to NCCL.
var wantConfig = configC{size: 48, magic: configMagic, version: configVersion, blocking: 0,
	cgaClusterSize: configUndefInt, minCTAs: configUndefInt, maxCTAs: configUndefInt, splitShare: configUndefInt}

func diffConfig(t *testing.T, got configC) {
	t.Helper()
	type fields struct {
		Size                             uint64
		Magic, Version                   uint32
		Blocking, Cga, MinC, MaxC, Split int32
		NetName                          uintptr
	}
	f := func(c configC) fields {
		return fields{c.size, c.magic, c.version, c.blocking, c.cgaClusterSize, c.minCTAs, c.maxCTAs, c.splitShare, c.netName}
	}
	if d := cmp.Diff(f(wantConfig), f(got)); d != "" {
		t.Errorf("ncclConfig_t as NCCL sees it (-want +got):\n%s", d)
	}
}

func TestABIInitRankConfigPassesTheIDByValue(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the by-value call is laid out for amd64 and arm64")
	}
	s := loadStub(t, "-DNO_SCALABLE")
	if s.lib.scalable {
		t.Fatal("the stub without ncclCommInitRankScalable was taken as having it")
	}
	s.reset()
	c, err := s.lib.CommInitRank(8, testID(), 5, Config{})
	if err != nil || c != 0x1234 {
		t.Fatalf("CommInitRank = %#x, %v; want the stub's 0x1234", c, err)
	}
	r := s.last()
	if r.name != "ncclCommInitRankConfig" || r.args[1] != 8 || r.args[2] != 5 || r.args[0] == 0 || r.args[3] == 0 {
		t.Errorf("the stub saw %s(comm %#x, nranks %d, rank %d, config %#x)", r.name, r.args[0], r.args[1], r.args[2], r.args[3])
	}
	if r.id != testID() {
		t.Errorf("the id arrived as %x, want %x", r.id, testID())
	}
	diffConfig(t, r.cfg)
}

func TestABIInitRankScalablePassesTheIDByPointer(t *testing.T) {
	s := loadStub(t)
	if !s.lib.scalable {
		t.Fatal("ncclCommInitRankScalable was not found")
	}
	s.reset()
	s.fail("ncclCommInitRankScalable", InProgress)
	c, err := s.lib.CommInitRank(4, testID(), 3, Config{})
	if c != 0x1235 || !Pending(err) {
		t.Fatalf("CommInitRank = %#x, %v; want 0x1235 and ncclInProgress", c, err)
	}
	r := s.last()
	if r.args[1] != 4 || r.args[2] != 3 || r.args[3] != 1 || r.id != testID() {
		t.Errorf("the stub saw nranks %d, rank %d, nId %d, id %x", r.args[1], r.args[2], r.args[3], r.id)
	}
	diffConfig(t, r.cfg)
}

func TestABIWrappers(t *testing.T) {
	s := loadStub(t)
	b := s.lib
	if b.Version() != 22703 {
		t.Errorf("Version = %d, want 22703", b.Version())
	}
	id, err := b.GetUniqueID()
	if err != nil || id[0] != 1 || id[127] != byte((127*3+1)%256) {
		t.Errorf("GetUniqueID = %x, %v", id, err)
	}
	const comm, stream = RawComm(0xc0), driver.Stream(0x5e)
	const send, recv = driver.DevicePtr(0x7f0000001000), driver.DevicePtr(0x7f0000002000)
	big := uint64(1)<<33 + 7 // a size_t count beyond 32 bits
	cases := []struct {
		call func() error
		name string
		args []uint64
	}{
		{func() error { return b.AllReduce(send, recv, big, BFloat16, Sum, comm, stream) }, "ncclAllReduce",
			[]uint64{uint64(send), uint64(recv), big, 9, 0, 0xc0, 0x5e}},
		{func() error { return b.ReduceScatter(send, recv, 3, Float16, RedOp(6), comm, stream) }, "ncclReduceScatter",
			[]uint64{uint64(send), uint64(recv), 3, 6, 6, 0xc0, 0x5e}},
		{func() error { return b.AllGather(send, recv, 11, Float32, comm, stream) }, "ncclAllGather",
			[]uint64{uint64(send), uint64(recv), 11, 7, 0xc0, 0x5e}},
		{func() error { return b.Broadcast(send, send, 5, Float32, 2, comm, stream) }, "ncclBroadcast",
			[]uint64{uint64(send), uint64(send), 5, 7, 2, 0xc0, 0x5e}},
		{func() error { return b.CommDestroy(comm) }, "ncclCommDestroy", []uint64{0xc0}},
		{func() error { return b.CommAbort(comm) }, "ncclCommAbort", []uint64{0xc0}},
		{func() error { return b.RedOpDestroy(RedOp(5), comm) }, "ncclRedOpDestroy", []uint64{5, 0xc0}},
		{b.GroupStart, "ncclGroupStart", []uint64{0}},
		{b.GroupEnd, "ncclGroupEnd", []uint64{0}},
	}
	for _, tc := range cases {
		s.reset()
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		r := s.last()
		if r.name != tc.name {
			t.Errorf("called %s, want %s", r.name, tc.name)
			continue
		}
		if d := cmp.Diff(tc.args, r.args[:len(tc.args)]); d != "" {
			t.Errorf("%s: arguments as C sees them (-want +got):\n%s", tc.name, d)
		}
	}

	s.reset()
	nc, err := b.CommSplit(comm, 3, -2, Config{})
	r := s.last()
	if err != nil || nc != 0x5678 || r.args[0] != 0xc0 || int64(r.args[1]) != 3 || int64(r.args[2]) != -2 {
		t.Errorf("CommSplit = %#x, %v; the stub saw %v", nc, err, r.args[:3])
	}
	diffConfig(t, r.cfg)
	if nc, _ := b.CommSplit(comm, NoColor, 0, Config{}); nc != 0 || int64(s.last().args[1]) != -1 {
		t.Errorf("CommSplit with NoColor = %#x, color seen %d", nc, int64(s.last().args[1]))
	}

	st, err := b.CommGetAsyncError(comm)
	if err != nil || st != InProgress {
		t.Errorf("CommGetAsyncError = %v, %v; want ncclInProgress", st, err)
	}

	for _, tc := range []struct {
		dt     DataType
		v      float32
		scalar []byte
	}{{Float32, 0.25, []byte{0, 0, 0x80, 0x3e}}, {Float16, 0.25, []byte{0, 0x34}}, {BFloat16, 0.5, []byte{0, 0x3f}}} {
		op, err := b.RedOpCreatePreMulSum(scalarBytes(tc.dt, tc.v), tc.dt, comm)
		r := s.last()
		if err != nil || op != 5 || r.args[2] != uint64(tc.dt) || r.args[3] != scalarHostImmediate || r.args[4] != 0xc0 {
			t.Errorf("PreMulSum %v: op %d, %v; the stub saw %v", tc.dt, op, err, r.args[:5])
		}
		if d := cmp.Diff(tc.scalar, r.scalar[:len(tc.scalar)]); d != "" {
			t.Errorf("PreMulSum %v scalar bytes (-want +got):\n%s", tc.dt, d)
		}
	}
}

func TestABIErrors(t *testing.T) {
	s := loadStub(t)
	s.reset()
	s.fail("ncclAllGather", InvalidArgument)
	err := s.lib.AllGather(0, 0, 1, Float32, 0xc0, 1)
	var e *Error
	if !errors.As(err, &e) || e.Code != InvalidArgument || e.Func != "ncclAllGather" {
		t.Fatalf("AllGather = %v, want an *Error of ncclInvalidArgument", err)
	}
	if !strings.Contains(err.Error(), "invalid argument (stub)") || !strings.Contains(err.Error(), "stub last error") {
		t.Errorf("the error %q lacks NCCL's description or its last error", err)
	}
	if Pending(err) {
		t.Error("an invalid argument is taken for ncclInProgress")
	}
}

func TestLoadRejectsAnOldNCCL(t *testing.T) {
	path := buildStub(t, "libnccl.so.2", "-DSTUB_VERSION=21703")
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	_, err := loadFrom([]driver.LibCandidate{{Path: missing, Source: "--cuda-lib-dir"}, {Path: path, Source: "LD_LIBRARY_PATH", Exists: true}})
	if !errors.Is(err, ErrNoNCCL) {
		t.Fatalf("loading NCCL 2.17.3: %v, want ErrNoNCCL", err)
	}
	for _, part := range []string{missing + " (--cuda-lib-dir): not found", path + " (LD_LIBRARY_PATH): NCCL 2.17.3 is older than 2.18.0", "pip install nvidia-nccl-cu12"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%v\nwant it to contain %q", err, part)
		}
	}
}

func TestLoadWithoutNCCLListsWhereItLooked(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	if !errors.Is(err, ErrNoNCCL) {
		t.Skipf("this machine has a libnccl (%v)", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "libnccl.so.2")+" (--cuda-lib-dir): not found") {
		t.Errorf("%v\nwant it to name the --cuda-lib-dir folder", err)
	}
}

func TestSymbolTableMatchesThePrototypes(t *testing.T) {
	for i, s := range symbols {
		if s.Name == "" {
			t.Errorf("symbol %d has no entry", i)
			continue
		}
		params := s.Proto[strings.Index(s.Proto, "(")+1 : strings.LastIndex(s.Proto, ")")]
		n := 0
		if strings.TrimSpace(params) != "" {
			n = strings.Count(params, ",") + 1
		}
		if n != s.Args || !strings.Contains(s.Proto, " "+s.Name+"(") {
			t.Errorf("%s: %d words for the prototype %q (%d parameters)", s.Name, s.Args, s.Proto, n)
		}
	}
}
