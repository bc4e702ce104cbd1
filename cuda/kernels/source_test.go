package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSourcesMatchTable parses every extern "C" kernel of the sources and
// checks names, parameter names and types against the launcher table,
// both ways.
func TestSourcesMatchTable(t *testing.T) {
	tab := NewTable()
	parsed := Parse(Source())
	seen := map[string]bool{}
	for _, p := range parsed {
		if seen[p.Name] {
			t.Errorf("%s defined twice in the sources", p.Name)
		}
		seen[p.Name] = true
		s := tab.Lookup(p.Name)
		if s == nil {
			t.Errorf("%s is in the sources but not in the launcher table", p.Name)
			continue
		}
		if d := cmp.Diff(s.Params, p.Params); d != "" {
			t.Errorf("%s: parameters (-table +source):\n%s", p.Name, d)
		}
	}
	for _, s := range tab.Specs() {
		if !seen[s.Name] {
			t.Errorf("%s is in the launcher table but not in the sources", s.Name)
		}
		for _, p := range s.Params {
			switch p.Type {
			case PtrF32, PtrConstF32, Ptr16, PtrConst16, PtrF64, PtrConstF64, PtrConstI32, PtrU32, PtrConstU64, I32, I64, F32:
			default:
				t.Errorf("%s: parameter %s has type %q, which launchers cannot pass", s.Name, p.Name, p.Type)
			}
		}
	}
	if len(parsed) < 100 {
		t.Errorf("parsed only %d kernels: is the pattern still matching?", len(parsed))
	}
}

func TestParse(t *testing.T) {
	got := Parse("extern \"C\" __global__ void k1(const float* x,\n  long long n) {}\nextern \"C\"  __global__ void k2() {}\n__global__ void hidden(int a) {}")
	want := []Spec{{Name: "k1", Params: []Param{{"x", PtrConstF32}, {"n", I64}}}, {Name: "k2"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Parse (-want +got):\n%s", d)
	}
}

// TestSourcesCompileAsCXX type-checks the kernels with the host C++
// compiler and a shim for CUDA's built-ins, where g++ exists: wrong
// argument counts, types or names in the wrappers fail here without a GPU.
func TestSourcesCompileAsCXX(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, ModuleName+".cpp")
	if err := os.WriteFile(src, []byte(Source()), 0o644); err != nil {
		t.Fatal(err)
	}
	shim, err := filepath.Abs("testdata/cuda_shim.h")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused-function", "-Werror", "-include", shim, src).CombinedOutput()
	if err != nil {
		t.Fatalf("g++ -fsyntax-only: %v\n%s", err, out)
	}
}
