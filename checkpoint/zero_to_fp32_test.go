package checkpoint_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/internal/ztest"
)

// torchPython returns a python3 that imports torch, or skips the test: the
// same search as ptfile's interop tests (PTFILE_PYTHON overrides it; CI
// installs Debian's python3-torch).
func torchPython(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("PTFILE_PYTHON"), "/usr/bin/python3", "python3"} {
		if c == "" {
			continue
		}
		if exec.Command(c, "-c", "import torch").Run() == nil {
			return c
		}
	}
	t.Skip("no python3 with torch (Debian: apt-get install python3-torch; or set PTFILE_PYTHON): the zero_to_fp32 interop test did not run")
	return ""
}

// pyTensors is what consolidate.py writes: an index (or the error that
// zero_to_fp32 raised) and the float32 elements of every tensor.
type pyTensors struct {
	Error   string `json:"error"`
	Tensors []struct {
		Name   string `json:"name"`
		DType  string `json:"dtype"`
		Shape  []int  `json:"shape"`
		Offset int    `json:"offset"`
		Numel  int    `json:"numel"`
	} `json:"tensors"`
	data []float32
}

func readPyTensors(t *testing.T, dir, name string) pyTensors {
	t.Helper()
	var p pyTensors
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Error != "" {
		return p
	}
	raw, err := os.ReadFile(filepath.Join(dir, name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	p.data = make([]float32, len(raw)/4)
	for i := range p.data {
		p.data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return p
}

// TestZeroToFP32ReadsDszero: every .pt file of a dszero checkpoint loads
// in real PyTorch (without DeepSpeed: ptfile/testdata/interop.py stands in
// for the classes it pickles), and DeepSpeed 0.14.5's own zero_to_fp32.py
// (testdata/zero_to_fp32, unchanged) consolidates dszero's ZeRO-1/2/3
// checkpoints (fp32 and bf16, 1–3 ranks, several stage-3 sub-groups) into
// dszero's fp32 master weights bit for bit, under the parameter names and
// shapes. Stage 0 checkpoints are refused by zero_to_fp32 exactly as
// DeepSpeed's own are (fp32: no optimizer-states files; bf16:
// BF16_Optimizer's files are "not a zero checkpoint"); for them, and at
// stages 1–2, the "module" state dict is checked instead.
func TestZeroToFP32ReadsDszero(t *testing.T) {
	py := torchPython(t)
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, tc := range []struct {
		stage    int
		dtype    string
		world    int
		subGroup int
	}{
		{0, "fp32", 1, 0}, {0, "bf16", 2, 0},
		{1, "fp32", 2, 0}, {1, "bf16", 3, 0},
		{2, "fp32", 1, 0}, {2, "fp32", 3, 0}, {2, "bf16", 2, 0},
		{3, "fp32", 1, 0}, {3, "fp32", 2, 0}, {3, "bf16", 3, 0}, {3, "fp32", 3, 1000}, {3, "bf16", 2, 1000},
	} {
		t.Run(fmt.Sprintf("z%d_%s_w%d_sg%d", tc.stage, tc.dtype, tc.world, tc.subGroup), func(t *testing.T) {
			plan, err := ztest.Plan(stageJSON(tc.stage, tc.dtype, tc.subGroup), tc.world)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			trained := runMLP(t, plan, d, 0, 3, dir, false, true)
			out := t.TempDir()
			cmd := exec.Command(py, "testdata/zero_to_fp32/consolidate.py", dir, out)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1")
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("consolidate.py: %v\n%s", err, b)
			}

			// (a) torch.load read every file dszero wrote.
			var loaded map[string][]string
			raw, err := os.ReadFile(filepath.Join(out, "loaded.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &loaded); err != nil {
				t.Fatal(err)
			}
			pts, _ := filepath.Glob(filepath.Join(dir, "global_step3", "*.pt"))
			if len(pts) == 0 || len(loaded) != len(pts) {
				t.Fatalf("torch loaded %d files, dszero wrote %d .pt files", len(loaded), len(pts))
			}
			for _, p := range pts {
				rel := filepath.Join("global_step3", filepath.Base(p))
				keys, ok := loaded[rel]
				if !ok {
					t.Errorf("%s: not loaded", rel)
				}
				if strings.HasSuffix(rel, "model_states.pt") && !slices.Contains(keys, "module") {
					t.Errorf("%s: torch sees keys %v, no module", rel, keys)
				}
			}

			want := func(bf16 bool) []float32 {
				w := append([]float32(nil), trained.final...)
				if bf16 {
					half.RoundBF16(w)
				}
				return w
			}
			check := func(what string, p pyTensors, w []float32, dtype string) {
				t.Helper()
				if len(p.Tensors) != len(d.Layout.Specs) {
					t.Fatalf("%s: %d tensors, the model has %d", what, len(p.Tensors), len(d.Layout.Specs))
				}
				for i, sp := range d.Layout.Specs {
					pt := p.Tensors[i]
					if pt.Name != sp.Name || !slices.Equal(pt.Shape, sp.Shape) || pt.DType != dtype || pt.Numel != sp.Numel {
						t.Fatalf("%s: tensor %d is %s %v %s, want %s %v %s", what, i, pt.Name, pt.Shape, pt.DType, sp.Name, sp.Shape, dtype)
					}
					if j := bitsEqual(p.data[pt.Offset:pt.Offset+pt.Numel], w[sp.Offset:sp.Offset+sp.Numel]); j >= 0 {
						t.Fatalf("%s: %s element %d is %v, dszero's fp32 master has %v", what, sp.Name, j, p.data[pt.Offset+j], w[sp.Offset+j])
					}
				}
			}

			// (b) zero_to_fp32's consolidation is dszero's fp32 master.
			fp32 := readPyTensors(t, out, "fp32")
			switch {
			case tc.stage == 0 && tc.dtype == "fp32":
				// DeepSpeed writes no *_optim_states.pt at stage 0 fp32 (testdata/ds_mlp_z0_fp32).
				if !strings.HasPrefix(fp32.Error, "FileNotFoundError: can't find *_optim_states.pt files") {
					t.Errorf("zero_to_fp32: %q, want DeepSpeed's refusal of a stage-0 checkpoint", fp32.Error)
				}
			case tc.stage == 0:
				// As for DeepSpeed's own bf16 stage-0 checkpoints (conformance mlp/z0_bf16).
				if !strings.HasPrefix(fp32.Error, "ValueError: ") || !strings.HasSuffix(fp32.Error, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt is not a zero checkpoint") {
					t.Errorf("zero_to_fp32: %q, want DeepSpeed's refusal of a BF16_Optimizer checkpoint", fp32.Error)
				}
			case fp32.Error != "":
				t.Fatalf("zero_to_fp32 refused dszero's checkpoint: %s\n%s", fp32.Error, b)
			default:
				check("zero_to_fp32", fp32, want(false), "float32")
			}

			// The module state dict (stages 0–2; stage 3 keeps only placeholders there).
			if tc.stage < 3 {
				check("module", readPyTensors(t, out, "module"), want(tc.dtype == "bf16"), map[string]string{"fp32": "float32", "bf16": "bfloat16"}[tc.dtype])
			}
			t.Logf("torch loaded %d files; zero_to_fp32: %s", len(loaded), map[bool]string{true: "bit-identical to dszero's fp32 master", false: fp32.Error}[fp32.Error == ""])
		})
	}
}
