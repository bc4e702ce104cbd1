package ptfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tensors lists the tree's contiguous floating tensors by path.
func tensors(v any, path string, out map[string]*Tensor) {
	switch x := v.(type) {
	case *Tensor:
		if x.Contiguous() && (x.DType == Float32 || x.DType == BFloat16 || x.DType == Float16) {
			out[path] = x
		}
	case *Dict:
		for k, e := range x.All() {
			tensors(e, path+"."+fmt.Sprint(k), out)
		}
	case List:
		for i, e := range x {
			tensors(e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// Stream + ReadFloat32 read every tensor as Read + Float32s do, without
// loading a storage; a flipped byte is an ErrChecksum.
func TestStreamReadFloat32(t *testing.T) {
	for _, name := range []string{"mlp_z2_bf16_mp_rank_00_model_states.pt", "mlp_z2_fp32_zero_pp_rank_1_mp_rank_00_optim_states.pt", "mlp_z3_bf16_zero_pp_rank_0_mp_rank_00_model_states.pt"} {
		p := filepath.Join("testdata", name)
		root, err := Read(p, Options{DeepSpeed: true})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]*Tensor{}
		tensors(root, "", want)
		f, err := Open(p, Options{DeepSpeed: true})
		if err != nil {
			t.Fatal(err)
		}
		f.Stream()
		got := map[string]*Tensor{}
		tensors(f.Root, "", got)
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d tensors streamed, %d read", name, len(got), len(want))
		}
		for k, wt := range want {
			w, err := wt.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			g := make([]float32, got[k].Numel())
			if err := got[k].ReadFloat32(g); err != nil {
				t.Fatalf("%s %s: %v", name, k, err)
			}
			if diff := cmp.Diff(w, g); diff != "" {
				t.Fatalf("%s %s: (-Float32s +ReadFloat32)\n%s", name, k, diff)
			}
		}
		for _, s := range f.Storages {
			if s.Data != nil {
				t.Errorf("%s: storage %s was loaded", name, s.Key)
			}
			if err := f.Verify(s); err != nil {
				t.Error(err)
			}
		}
		f.Close()
	}
	// A flipped byte in the fp32 partition.
	b, err := os.ReadFile(filepath.Join("testdata", "mlp_z2_fp32_zero_pp_rank_1_mp_rank_00_optim_states.pt"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(filepath.Join("testdata", "mlp_z2_fp32_zero_pp_rank_1_mp_rank_00_optim_states.pt"), Options{DeepSpeed: true})
	if err != nil {
		t.Fatal(err)
	}
	big := f.Storages[0]
	for _, s := range f.Storages {
		if s.NBytes() > big.NBytes() {
			big = s
		}
	}
	zf := f.entries[f.Archive+"/data/"+big.Key]
	off, err := zf.DataOffset()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[off+5] ^= 0x40
	p := filepath.Join(t.TempDir(), "bad.pt")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(p, Options{DeepSpeed: true}); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Stream()
	var s *Storage
	for _, x := range f.Storages {
		if x.Key == big.Key {
			s = x
		}
	}
	tt := &Tensor{DType: s.DType, Shape: []int64{s.Numel}, Stride: []int64{1}, Storage: s}
	if err := tt.ReadFloat32(make([]float32, s.Numel)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("reading a corrupted storage: %v, want ErrChecksum", err)
	}
}
