package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/libfind"
)

// TestHelp: `dszero help SUB` and `dszero SUB --help` (and -h) exit 0
// with the same text on stdout: the usage, examples, and the flags as
// --name; every flag an example uses is one the command has.
func TestHelp(t *testing.T) {
	for _, c := range commands() {
		sub := strings.Fields(c.name)
		code, want, errs := runCLI(append([]string{"help"}, sub...)...)
		if code != 0 || errs != "" {
			t.Errorf("help %s: exit %d: %s", c.name, code, errs)
			continue
		}
		for _, form := range [][]string{append(sub, "--help"), append(sub, "-h"), append(append(sub, "--quiet"), "-help")} {
			code, got, errs := runCLI(form...)
			if c.name == "version" && form[len(form)-2] == "--quiet" {
				continue // version has no --quiet to put before -help
			}
			if code != 0 || got != want || errs != "" {
				t.Errorf("%v: exit %d, stderr %q, output differs from help %s:\n%s", form, code, errs, c.name, got)
			}
		}
		if !strings.HasPrefix(want, "usage: dszero "+c.name) || !strings.Contains(want, "\nExamples:\n  dszero "+c.name) {
			t.Errorf("help %s lacks the usage or an example:\n%s", c.name, want)
		}
		if regexp.MustCompile(`(?m)^  -[a-z]`).MatchString(want) {
			t.Errorf("help %s lists a flag as -name, not --name:\n%s", c.name, want)
		}
		for _, ex := range c.examples {
			for _, f := range regexp.MustCompile(`(?:^| )(--[a-z0-9_-]+)`).FindAllStringSubmatch(ex, -1) {
				if !regexp.MustCompile(`(?m)^  (--[a-z0-9_-]+, )*` + f[1] + `[ ,\n]`).MatchString(want) {
					t.Errorf("help %s: example %q uses %s, which is not among its flags", c.name, ex, f[1])
				}
			}
		}
	}
	// The names of one setting are listed together.
	_, out, _ := runCLI("help", "train")
	for _, want := range []string{"  --nproc, --num_gpus int\n", "  --save string\n", "  --output_dir string\n", "  --save_total_limit int\n", "  --save-interval, --save_steps int\n",
		"  --micro-batch, --per_device_train_batch_size int\n", "  --resume_from_checkpoint string\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("help train lacks %q", want)
		}
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "dszero report") || !strings.Contains(out, "dszero help COMMAND") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI("config", "--help"); code != 0 || !strings.Contains(out, "usage: dszero config check") || !strings.Contains(out, "usage: dszero config explain") {
		t.Errorf("config --help: exit %d\n%s", code, out)
	}
	if code, _, errs := runCLI("help", "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: exit %d: %s", code, errs)
	}
	// A bad flag is one line and a pointer to the help, not the flag list.
	code, _, errs := runCLI("train", "--bogus")
	if code != 2 || errs != "flag provided but not defined: -bogus\nrun 'dszero help train' for its flags and examples\n" {
		t.Errorf("train --bogus: exit %d: %q", code, errs)
	}
}

// TestVersion: dszero version and --version print one line naming the
// Go version and platform.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errs := runCLI(args...)
		if code != 0 || !regexp.MustCompile(`^dszero \S+.*, go1\.\d+.* [a-z0-9]+/[a-z0-9]+, (no )?cgo`).MatchString(out) || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d %q %s", args, code, out, errs)
		}
	}
}

// TestReport: dszero report names the build, the matmul engine, each
// library it looks for and the CPU; on a fake machine it finds the CUDA
// driver and NCCL where they are, with their versions, and the driver's
// kernel module; --json carries the same.
func TestReport(t *testing.T) {
	code, out, errs := runCLI("report")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"\nBuild\n  dszero ", "\nMatmul (--blas auto)\n  ", "  CUDA driver  libcuda.so.1 ", "  NCCL ", "  cuBLASLt ", "  NVRTC ", "  Open MPI ", "\nCPU\n", "logical CPUs"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI("report", "--json")
	var r machineReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Libraries) != len(wantedLibraries) || r.CPU.Logical < 1 || r.BLAS == "" {
		t.Errorf("report --json: exit %d, %v: %+v", code, err, r)
	}

	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	nccl := filepath.Join(root, "venv/lib/python3.11/site-packages/nvidia/nccl/lib")
	for _, d := range []string{lib, nccl, filepath.Join(root, "proc/driver/nvidia")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(lib, "libcuda.so.550.54.15"), nil, 0o644)
	os.Symlink("libcuda.so.550.54.15", filepath.Join(lib, "libcuda.so.1"))
	os.WriteFile(filepath.Join(nccl, "libnccl.so.2"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "proc/driver/nvidia/version"), []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\nGCC version: 12\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc/cpuinfo"), []byte("processor\t: 0\nmodel name\t: Fake CPU 9000\n"), 0o644)
	fake := newMachineReport(libfind.Finder{Root: root, Arch: "x86_64-linux-gnu", Env: map[string]string{"VIRTUAL_ENV": "/venv"}}, root+"/")
	var b strings.Builder
	fake.text(&b)
	for _, want := range []string{
		"  CUDA driver  libcuda.so.1      550.54.15  " + filepath.Join(lib, "libcuda.so.1") + " (system library directory)\n",
		"  NCCL         libnccl.so*       2  " + filepath.Join(nccl, "libnccl.so.2") + " (pip nvidia wheel)\n",
		"  NVRTC        libnvrtc.so*      not found\n",
		"  NVIDIA kernel module: NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n",
		"\nCPU\n  Fake CPU 9000\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("fake machine's report lacks %q:\n%s", want, b.String())
		}
	}
}
