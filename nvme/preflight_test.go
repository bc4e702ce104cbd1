package nvme

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
)

// TestPreflight: a swap folder that cannot hold the run fails New with a
// *PreflightError naming the path, the bytes needed and the fix, and New
// leaves nothing behind.
func TestPreflight(t *testing.T) {
	const need = 3 << 20
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T) (FS, string) // the filesystem and nvme_path
		problem string
		cause   error
	}{
		{"missing os", func(t *testing.T) (FS, string) {
			return NewOSFS(), filepath.Join(t.TempDir(), "not_mounted")
		}, "does not exist", syscall.ENOENT},
		{"missing mem", func(t *testing.T) (FS, string) {
			return NewMemFS(0), "/local_nvme"
		}, "does not exist", syscall.ENOENT},
		{"a file", func(t *testing.T) (FS, string) {
			p := filepath.Join(t.TempDir(), "f")
			os.WriteFile(p, nil, 0o600)
			return NewOSFS(), p
		}, "is not a directory", syscall.ENOTDIR},
		{"unwritable os", func(t *testing.T) (FS, string) {
			if os.Geteuid() == 0 {
				t.Skip("root writes to read-only directories; the fault FS case covers it")
			}
			d := t.TempDir()
			os.Chmod(d, 0o500)
			t.Cleanup(func() { os.Chmod(d, 0o700) })
			return NewOSFS(), d
		}, "is not writable", syscall.EACCES},
		{"unwritable fault", func(t *testing.T) (FS, string) {
			return NewFaultFS(NewOSFS(), Fault{Ops: OpMkdir, Err: syscall.EACCES}), t.TempDir()
		}, "is not writable", syscall.EACCES},
		{"read-only fault", func(t *testing.T) (FS, string) {
			return NewFaultFS(NewOSFS(), Fault{Ops: OpOpen, Path: ".preflight", Err: syscall.EROFS}), t.TempDir()
		}, "is not writable", syscall.EROFS},
		{"too small mem", func(t *testing.T) (FS, string) {
			m := NewMemFS(1 << 20)
			m.Mkdir("/nvme")
			return m, "/nvme"
		}, "is too small", syscall.ENOSPC},
		{"too small fault", func(t *testing.T) (FS, string) {
			return NewFaultFS(NewOSFS(), Fault{Ops: OpWrite, From: 2 << 20, Short: true}), t.TempDir()
		}, "is too small", ErrShortWrite},
		{"EIO fault", func(t *testing.T) (FS, string) {
			return NewFaultFS(NewOSFS(), Fault{Ops: OpWrite, Err: syscall.EIO}), t.TempDir()
		}, "reports I/O errors", syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, path := tc.setup(t)
			o := testOptions(path)
			o.Preflight = need
			acct := mem.NewAccountant(0)
			s, err := New(fsys, acct, o)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			var pe *PreflightError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *PreflightError", err)
			}
			if !errors.Is(err, tc.cause) {
				t.Errorf("error %v does not wrap %v", err, tc.cause)
			}
			msg := err.Error()
			for _, want := range []string{"zero_optimization.offload_optimizer.nvme_path", path, tc.problem, "3145728 bytes", "fix: "} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			if tc.cause == syscall.ENOSPC && pe.Written > 1<<20 {
				t.Errorf("Written = %d on a 1 MiB disk", pe.Written)
			}
			if _, err := fsys.ReadDir(filepath.Join(path, "dszero_rank0")); err == nil {
				t.Error("a failed New left the rank folder")
			}
			for _, tier := range mem.Tiers() {
				if b := acct.Snapshot().LiveTotal[tier]; b != 0 {
					t.Errorf("a failed New left %d bytes accounted in %s", b, tier)
				}
			}
		})
	}
}

func TestPreflightPasses(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			o := testOptions(root)
			o.Preflight = 1<<20 + 1
			s, acct := newSwapper(t, fsys, o)
			st := s.Stats()
			if st.PreflightBytes != 1<<20+Align || st.PreflightTime <= 0 {
				t.Errorf("preflight stats %+v", st)
			}
			if names, _ := fsys.ReadDir(s.Dir()); len(names) != 0 {
				t.Errorf("the preflight left %v", names)
			}
			if b := acct.Snapshot().LiveBytes(mem.NVMe, mem.OptimState); b != 0 {
				t.Errorf("the preflight left %d NVMe bytes accounted", b)
			}
		})
	}
}

// TestPreflightBudget: an NVMe budget smaller than the preflight is an
// out-of-memory error of tier nvme.
func TestPreflightBudget(t *testing.T) {
	m := NewMemFS(0)
	m.Mkdir("/nvme")
	o := testOptions("/nvme")
	o.Preflight = 1 << 20
	acct := mem.NewAccountant(0)
	acct.SetCapacity(mem.NVMe, 1<<19)
	_, err := New(m, acct, o)
	var oom *mem.OOMError
	if !errors.As(err, &oom) || oom.Tier != mem.NVMe {
		t.Errorf("New over the NVMe budget = %v", err)
	}
	acct = mem.NewAccountant(0)
	acct.SetCapacity(mem.PinnedHost, 1<<10)
	if _, err := New(m, acct, o); !errors.As(err, &oom) || oom.Tier != mem.PinnedHost || !strings.Contains(err.Error(), "buffer_count") {
		t.Errorf("New over the pinned budget = %v", err)
	}
}

func TestValidate(t *testing.T) {
	o := Options{BlockSize: 1000, UseGDS: true, Category: mem.Category(99), Name: "a/b", Rank: -1, Preflight: -1, Source: "zero_optimization.offload_param"}
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted zero options")
	}
	for _, want := range []string{
		"zero_optimization.offload_param.nvme_path is empty",
		"zero_optimization.offload_param.buffer_count 0",
		"buffer size 0",
		"aio.block_size 1000",
		"aio.queue_depth 0",
		"aio.intra_op_parallelism 0",
		"aio.use_gds",
		"rank -1",
		`name "a/b"`,
		"preflight size -1",
		"category",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate's error lacks %q:\n%v", want, err)
		}
	}
	if _, err := New(NewMemFS(0), mem.NewAccountant(0), o); err == nil {
		t.Error("New accepted invalid options")
	}
}

func TestOptionsFromPlan(t *testing.T) {
	plan, err := dsconfig.Load(`{
		"train_micro_batch_size_per_gpu": 1,
		"zero_optimization": {
			"stage": 3,
			"offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5},
			"offload_param": {"device": "nvme", "nvme_path": "/local_nvme2", "buffer_count": 6, "buffer_size": 1e6}
		},
		"aio": {"block_size": 262144, "queue_depth": 16, "intra_op_parallelism": 2, "single_submit": true, "overlap_events": false}
	}`, dsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oo, err := OptimizerOptions(plan, 2, 4<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Path: "/local_nvme", Rank: 2, Name: "optimizer", Source: "zero_optimization.offload_optimizer",
		BufferCount: 5, BufferBytes: 4 << 20, BlockSize: 262144, QueueDepth: 16, IntraOpParallelism: 2,
		SingleSubmit: true, OverlapEvents: false, Preflight: 1 << 30, Category: mem.OptimState}
	if oo != want {
		t.Errorf("OptimizerOptions = %+v\nwant %+v", oo, want)
	}
	po, err := ParamOptions(plan, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if po.Path != "/local_nvme2" || po.Name != "params" || po.BufferCount != 6 || po.BufferBytes != 2e6 || po.Category != mem.Params16 {
		t.Errorf("ParamOptions = %+v", po)
	}
	if err := po.Validate(); err != nil {
		t.Error(err)
	}
	plain, err := dsconfig.Load(`{"train_micro_batch_size_per_gpu": 1}`, dsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OptimizerOptions(plain, 0, 1, 0); err == nil || !strings.Contains(err.Error(), "offload_optimizer.device") {
		t.Errorf("OptimizerOptions without NVMe offload = %v", err)
	}
}
