package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/internal/libfind"
	"github.com/dszero/dszero/mem"
)

// machineReport is dszero report: what this machine offers dszero, as
// DeepSpeed's ds_report tells what DeepSpeed finds. Its --json field
// names are stable.
type machineReport struct {
	Build     build        `json:"build"`
	BLAS      string       `json:"blas"` // the matmul engine dszero train uses with --blas auto
	Libraries []libraryRow `json:"libraries"`
	MPIRun    string       `json:"mpirun,omitempty"` // mpirun on PATH
	NVDriver  string       `json:"nvidia_driver,omitempty"`
	CPU       cpuReport    `json:"cpu"`
}

// libraryRow is one library dszero looks for, and where it was found.
type libraryRow struct {
	What   string          `json:"what"`
	Name   string          `json:"name"` // the file name searched ("*": any suffix)
	UsedBy string          `json:"used_by"`
	Found  []libfind.Found `json:"found"`
}

type cpuReport struct {
	Model      string   `json:"model,omitempty"`
	Logical    int      `json:"logical_cpus"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	MemTotal   int64    `json:"memory_bytes,omitempty"`
	Features   []string `json:"features"`
}

// wantedLibraries are the libraries report looks for.
var wantedLibraries = []struct{ what, name, usedBy string }{
	{"OpenBLAS", "libopenblas.so*", "matmul (--blas openblas; loaded at run time when cgo is on)"},
	{"Open MPI", "libmpi.so*", "multi-process training under mpirun (go build -tags mpi)"},
	{"CUDA driver", "libcuda.so.1", "not yet: dszero computes on the CPU"},
	{"NCCL", "libnccl.so*", "not yet: dszero computes on the CPU"},
	{"NVRTC", "libnvrtc.so*", "not yet: dszero computes on the CPU"},
	{"cuBLASLt", "libcublasLt.so*", "not yet: dszero computes on the CPU"},
}

func runReport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero report", stderr)
	asJSON := fs.Bool("json", false, "write the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dszero report: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	r := newMachineReport(libfind.New(), "/")
	if *asJSON {
		return writeJSON(stdout, stderr, r)
	}
	r.text(stdout)
	return 0
}

// newMachineReport looks for the libraries with f and reads the CPU and
// driver facts from the /proc under root.
func newMachineReport(f libfind.Finder, root string) machineReport {
	r := machineReport{Build: readBuild()}
	if e, err := blas.New(blas.Options{}); err == nil {
		r.BLAS = e.Description()
	} else {
		r.BLAS = err.Error()
	}
	for _, w := range wantedLibraries {
		r.Libraries = append(r.Libraries, libraryRow{What: w.what, Name: w.name, UsedBy: w.usedBy, Found: f.Find(w.name)})
	}
	if p, err := exec.LookPath("mpirun"); err == nil {
		r.MPIRun = p
	}
	if b, err := os.ReadFile(root + "proc/driver/nvidia/version"); err == nil {
		r.NVDriver = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	r.CPU = cpuReport{Model: procField(root+"proc/cpuinfo", "model name"), Logical: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Features: cpuFeatures()}
	if kb := procField(root+"proc/meminfo", "MemTotal"); kb != "" {
		var n int64
		fmt.Sscanf(kb, "%d kB", &n)
		r.CPU.MemTotal = n << 10
	}
	return r
}

func (r machineReport) text(w io.Writer) {
	b := r.Build
	fmt.Fprintf(w, "dszero report\n\nBuild\n  %s\n", b)
	mpi := "no: multi-process runs need go build -tags mpi ./cmd/dszero"
	if b.MPI {
		mpi = "yes"
	}
	fmt.Fprintf(w, "  Open MPI backend built in: %s\n", mpi)
	fmt.Fprintf(w, "\nMatmul (--blas auto)\n  %s\n", r.BLAS)
	fmt.Fprintf(w, "\nLibraries found (by file, none loaded by this report)\n")
	for _, l := range r.Libraries {
		fmt.Fprintf(w, "  %-12s %-17s ", l.What, l.Name)
		if len(l.Found) == 0 {
			fmt.Fprintf(w, "not found\n")
		}
		for i, f := range l.Found {
			if i > 0 {
				fmt.Fprintf(w, "  %-12s %-17s ", "", "")
			}
			v := f.Version
			if v == "" {
				v = "version unknown"
			}
			fmt.Fprintf(w, "%s  %s (%s)\n", v, f.Path, f.Via)
		}
		fmt.Fprintf(w, "  %-12s %-17s used for: %s\n", "", "", l.UsedBy)
	}
	if r.MPIRun != "" {
		fmt.Fprintf(w, "  mpirun: %s\n", r.MPIRun)
	}
	if r.NVDriver != "" {
		fmt.Fprintf(w, "  NVIDIA kernel module: %s\n", r.NVDriver)
	}
	c := r.CPU
	fmt.Fprintf(w, "\nCPU\n")
	if c.Model != "" {
		fmt.Fprintf(w, "  %s\n", c.Model)
	}
	fmt.Fprintf(w, "  %d logical CPUs, GOMAXPROCS %d", c.Logical, c.GOMAXPROCS)
	if c.MemTotal > 0 {
		fmt.Fprintf(w, ", %s of memory", mem.FormatBytes(c.MemTotal))
	}
	fmt.Fprintf(w, "\n  features: %s\n", listOrNone(c.Features))
}

// procField is the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cpuFeatures lists the vector and matrix extensions that matter to
// matmul and the optimizer kernels.
func cpuFeatures() []string {
	var fs []string
	add := func(ok bool, name string) {
		if ok {
			fs = append(fs, name)
		}
	}
	x, a := cpu.X86, cpu.ARM64
	add(x.HasSSE42, "sse4.2")
	add(x.HasAVX, "avx")
	add(x.HasAVX2, "avx2")
	add(x.HasFMA, "fma")
	add(x.HasAVX512F, "avx512f")
	add(x.HasAVX512BW, "avx512bw")
	add(x.HasAVX512VL, "avx512vl")
	add(x.HasAVX512VNNI, "avx512vnni")
	add(x.HasAVX512BF16, "avx512bf16")
	add(x.HasAVXVNNI, "avxvnni")
	add(x.HasAMXTile, "amx-tile")
	add(x.HasAMXBF16, "amx-bf16")
	add(a.HasASIMD, "asimd")
	add(a.HasFPHP, "fphp")
	add(a.HasASIMDHP, "asimdhp")
	add(a.HasASIMDDP, "asimddp")
	add(a.HasI8MM, "i8mm")
	add(a.HasSVE, "sve")
	add(a.HasSVE2, "sve2")
	if fs == nil {
		fs = []string{}
	}
	return fs
}
