package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
)

// TestExportCLI: dszero export writes a checkpoint's consolidated weights
// (here DeepSpeed's own ZeRO-2 checkpoint, and one dszero saved at stage 3
// with --model for config.json, which dszero train --model then loads);
// bad arguments are usage errors, a missing checkpoint an error naming it.
func TestExportCLI(t *testing.T) {
	out := t.TempDir()
	code, stdout, errs := runCLI("export", "../../checkpoint/testdata/ds_mlp_z2_fp32", filepath.Join(out, "ds"))
	if code != 0 || !strings.Contains(stdout, "ZeRO stage 2, 2 rank(s)") || !strings.Contains(stdout, "6 parameters, 5768 elements") {
		t.Fatalf("exit %d\n%s%s", code, stdout, errs)
	}
	ck := filepath.Join(out, "ck")
	if code, o, e := runCLI("train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--nproc", "2", "--quiet",
		"--deepspeed", "../../examples/ds_config_zero3.json", "--save", ck); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, o, e)
	}
	if code, o, e := runCLI("export", ck, filepath.Join(out, "tiny"), "--model", "tiny"); code != 0 || !strings.Contains(o, "checked against its manifests") {
		t.Fatalf("export: exit %d\n%s%s", code, o, e)
	}
	if _, err := os.Stat(filepath.Join(out, "tiny", "config.json")); err != nil {
		t.Error(err)
	}
	if code, o, e := runCLI("train", "--model", filepath.Join(out, "tiny"), "--data", "random", "--seq", "16", "--steps", "1", "--quiet"); code != 0 {
		t.Errorf("train --model of the export: exit %d\n%s%s", code, o, e)
	}
	if code, _, _ := runCLI("export", ck); code != 2 {
		t.Errorf("one argument: exit %d, want 2", code)
	}
	if code, _, e := runCLI("export", filepath.Join(out, "nothing"), filepath.Join(out, "x")); code != 1 || !strings.Contains(e, "latest") {
		t.Errorf("a missing checkpoint: exit %d, %s", code, e)
	}
}

// tensorsOf reads every tensor of a safetensors file as float32, with its
// dtype and shape.
func tensorsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := model.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	for _, ti := range f.Tensors {
		v := make([]float32, ti.Numel())
		if err := f.ReadFloat32(ti.Name, v); err != nil {
			t.Fatal(err)
		}
		out[ti.Name] = fmt.Sprintf("%s %v %x", ti.DType, ti.Shape, float32Bits(v))
	}
	return out
}

func float32Bits(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestExportHuggingFace: with --model, dszero export writes what
// transformers loads for that architecture — the weights --save-model
// writes, under Hugging Face GPT-2's names with the Conv1D weights
// transposed, bit for bit — and a config.json whose torch_dtype is the
// dtype written; a --model that is not the checkpoint's is an error
// saying so, before anything is written.
func TestExportHuggingFace(t *testing.T) {
	dir := t.TempDir()
	ck, hf := filepath.Join(dir, "ck"), filepath.Join(dir, "hf")
	if code, o, e := runCLI("train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--nproc", "2", "--quiet",
		"--deepspeed", "../../examples/ds_config_zero3.json", "--save", ck, "--save-model", hf); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, o, e)
	}
	want := tensorsOf(t, filepath.Join(hf, "model.safetensors"))
	if _, ok := want["h.0.attn.c_attn.weight"]; !ok {
		t.Fatalf("--save-model wrote %v", want)
	}
	for _, dtype := range []string{"fp32", "bf16"} {
		out := filepath.Join(dir, "export-"+dtype)
		if code, o, e := runCLI("export", ck, out, "--model", "tiny", "--dtype", dtype); code != 0 {
			t.Fatalf("export --dtype %s: exit %d\n%s%s", dtype, code, o, e)
		}
		got := tensorsOf(t, filepath.Join(out, "model.safetensors"))
		if dtype == "fp32" && !maps.Equal(got, want) {
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: exported %.60s…, --save-model %.60s…", k, got[k], want[k])
				}
			}
			t.Fatalf("exported tensors %v, want --save-model's", slices.Sorted(maps.Keys(got)))
		}
		if dtype == "bf16" {
			for k, v := range got {
				if !strings.HasPrefix(v, "BF16 ") {
					t.Errorf("%s: %.40s…, want BF16", k, v)
				}
			}
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
				t.Errorf("bf16 export names %v", slices.Sorted(maps.Keys(got)))
			}
		}
		var cfg struct {
			Architectures []string `json:"architectures"`
			TorchDtype    string   `json:"torch_dtype"`
		}
		b, _ := os.ReadFile(filepath.Join(out, "config.json"))
		json.Unmarshal(b, &cfg)
		if wantDT := map[string]string{"fp32": "float32", "bf16": "bfloat16"}[dtype]; cfg.TorchDtype != wantDT || !slices.Equal(cfg.Architectures, []string{"GPT2LMHeadModel"}) {
			t.Errorf("--dtype %s: config.json %s", dtype, b)
		}
	}
	bad := filepath.Join(dir, "bad")
	code, _, e := runCLI("export", ck, bad, "--model", "small")
	if code != 1 || !strings.Contains(e, "--model small") || !strings.Contains(e, "trained with") {
		t.Errorf("--model small for a tiny checkpoint: exit %d, %s", code, e)
	}
	if _, err := os.Stat(filepath.Join(bad, "model.safetensors")); err == nil {
		t.Errorf("a model.safetensors was written for the wrong --model")
	}
}

// TestCheckpointErrorsForUsers: what dszero export and dszero train
// --load say about a checkpoint holding a Python object dszero does not
// read (argparse.Namespace, as scripts save their args in client state)
// names the file and the class and says what to do — not which Go option
// a library caller would set. A checkpoint whose entries are compressed
// (re-zipped with deflate) exports as the original does.
func TestCheckpointErrorsForUsers(t *testing.T) {
	dir := t.TempDir()
	ns := filepath.Join(dir, "ns")
	if err := os.CopyFS(ns, os.DirFS("../../checkpoint/testdata/ds_mlp_z2_fp32")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ns, "global_step5", "mp_rank_00_model_states.pt")
	v, err := ptfile.Read(file, ptfile.Options{DeepSpeed: true})
	if err != nil {
		t.Fatal(err)
	}
	v.(*ptfile.Dict).Set("args", &ptfile.Object{Module: "argparse", Name: "Namespace", Kind: ptfile.NewObject, Args: ptfile.Tuple{}, State: ptfile.DictOf("lr", 0.1)})
	if err := ptfile.Write(file, v); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"export", ns, filepath.Join(dir, "out")},
		{"train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "1", "--quiet", "--load", ns},
	} {
		code, _, e := runCLI(args...)
		if code != 1 || strings.Contains(e, "Options") || strings.Contains(e, "[]string") ||
			!strings.Contains(e, "mp_rank_00_model_states.pt") || !strings.Contains(e, "argparse.Namespace is not allowed") || !strings.Contains(e, "save the checkpoint without that object") {
			t.Errorf("dszero %s: exit %d\n%s", args[0], code, e)
		}
	}

	// Every entry deflated.
	zipped := filepath.Join(dir, "zipped")
	if err := os.CopyFS(zipped, os.DirFS("../../checkpoint/testdata/ds_mlp_z2_fp32")); err != nil {
		t.Fatal(err)
	}
	pts, _ := filepath.Glob(filepath.Join(zipped, "global_step5", "*.pt"))
	for _, p := range pts {
		deflateAll(t, p)
	}
	for _, c := range []string{"../../checkpoint/testdata/ds_mlp_z2_fp32", zipped} {
		if code, o, e := runCLI("export", c, filepath.Join(dir, filepath.Base(c))); code != 0 {
			t.Fatalf("export %s: exit %d\n%s%s", c, code, o, e)
		}
	}
	if a, b := tensorsOf(t, filepath.Join(dir, "ds_mlp_z2_fp32", "model.safetensors")), tensorsOf(t, filepath.Join(dir, "zipped", "model.safetensors")); !maps.Equal(a, b) {
		t.Errorf("the deflated checkpoint exports other weights")
	}
}

// deflateAll rewrites the zip archive at path with every entry deflated.
func deflateAll(t *testing.T, path string) {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: zf.Name, Method: zip.Deflate})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	zr.Close()
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
