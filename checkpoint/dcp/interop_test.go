package dcp

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/ptfile"
)

// Interop fixtures (testdata/README.md):
//
//	testdata/standin/w1, w3  the fixture saved on 1 and 3 ranks by
//	                         gen/standin.py: CPython's pickler over
//	                         dataclasses modelled on torch's, real
//	                         torch.save blobs (Debian's torch 1.13)
//	testdata/torch/*         the fixture saved by torch >= 2.4's dcp.save
//	                         (gen/torch_dcp.py on the GPU machine); absent
//	                         until its output is committed
//	testdata/dszero/w3       dszero's own save, for torch_dcp.py to load
//	                         with dcp.load; kept equal to what the writer
//	                         writes now by TestDszeroGolden (-update
//	                         rewrites it)

var update = flag.Bool("update", false, "rewrite testdata/dszero from the current writer")

// checkFixture checks that dir holds the fixture: every key, every value,
// every tensor whole and by rows at two world sizes, and the nesting.
func checkFixture(t *testing.T, dir string) {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leaves := specLeaves(t)
	if len(c.Meta.Items) != len(leaves) {
		t.Fatalf("%s: %d items, want %d", dir, len(c.Meta.Items), len(leaves))
	}
	for _, lf := range leaves {
		v, err := c.ReadValue(lf.Key, ptfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if describe(v) != describe(lf.Value) {
			t.Fatalf("%s: %s is %s, want %s", dir, lf.Key, describe(v), describe(lf.Value))
		}
		whole, ok := lf.Value.(*ptfile.Tensor)
		if !ok {
			continue
		}
		for _, world := range []int{2, 4} {
			for r := range world {
				rows, ok, err := c.ReadRows(lf.Key, world, r)
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := RowChunk(whole.Shape, world, r); ok && describe(rows) != wantBox(t, whole, b) {
					t.Fatalf("%s: %s rank %d of %d: %s, want %s", dir, lf.Key, r, world, describe(rows), wantBox(t, whole, b))
				}
			}
		}
	}
	sd, err := c.StateDict(ptfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if describe(sd) != describe(specStateDict(t)) {
		t.Fatalf("%s: state dict\n%s\nwant\n%s", dir, describe(sd), describe(specStateDict(t)))
	}
}

func TestReadStandin(t *testing.T) {
	for _, w := range []string{"w1", "w3"} {
		dir := filepath.Join("testdata", "standin", w)
		checkFixture(t, dir)
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		// CPython pickled checkpoint_id as pathlib.PosixPath('standin', w).
		if c.Meta.CheckpointID != "standin/"+w || c.Meta.Version != "1.0.0" || len(c.Meta.SaveID) != 36 {
			t.Fatalf("%s: storage meta %q %q %q", dir, c.Meta.CheckpointID, c.Meta.Version, c.Meta.SaveID)
		}
		c.Close()
	}
}

// TestReadTorch reads what torch's own dcp.save wrote (gen/torch_dcp.py
// write, committed from the GPU machine's run).
func TestReadTorch(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "torch", "*", MetadataFile))
	if len(dirs) == 0 {
		t.Skip("no testdata/torch/*: torch >= 2.4's files are not committed yet (scripts/gpu/run.sh writes them to $OUT/dcp-torch)")
	}
	for _, m := range dirs {
		checkFixture(t, filepath.Dir(m))
	}
}

// TestStandinReadsOurs has the stand-in reader (CPython's unpickler over
// the modelled classes, torch.load of every blob) read dszero's saves.
func TestStandinReadsOurs(t *testing.T) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import torch").Run() != nil {
		t.Skip("no /usr/bin/python3 with torch: the stand-in interop test did not run")
	}
	args := []string{"testdata/gen/standin.py", "read"}
	for _, world := range []int{1, 3, 4} {
		dir := filepath.Join(t.TempDir(), "ck")
		if _, err := SaveStateDict(dir, specStateDict(t), world, Options{}); err != nil {
			t.Fatal(err)
		}
		args = append(args, dir)
	}
	args = append(args, filepath.Join("testdata", "dszero", "flat3")) // ZeRO's flat chunks
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("standin.py read: %v\n%s", err, out)
	}
}

// TestDszeroGolden keeps testdata/dszero/w3 — what torch_dcp.py loads with
// dcp.load on the GPU machine — equal to what the writer writes now.
func TestDszeroGolden(t *testing.T) {
	golden := filepath.Join("testdata", "dszero", "w3")
	dir := golden
	if !*update {
		dir = filepath.Join(t.TempDir(), "w3")
	}
	o := Options{SaveID: "00000000-0000-4000-8000-000000000000", CheckpointID: "dszero/w3"}
	if _, err := SaveStateDict(dir, specStateDict(t), 3, o); err != nil {
		t.Fatal(err)
	}
	checkFixture(t, golden)
	for _, name := range []string{MetadataFile, FileName(0), FileName(1), FileName(2)} {
		want, err := os.ReadFile(filepath.Join(golden, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs from what the writer writes now: go test ./checkpoint/dcp -run TestDszeroGolden -update", filepath.Join(golden, name))
		}
	}
}

// TestReadTorchFSDP2 reads the Accelerate-style checkpoint of an FSDP2
// model that torch_dcp.py saved (pytorch_model_fsdp_0/, optimizer_0/) and
// compares it, key by key, with the full state dicts torch gathered beside
// it (expected_model.pt, expected_optim.pt).
func TestReadTorchFSDP2(t *testing.T) {
	base := filepath.Join("testdata", "torch", "fsdp2")
	if _, err := os.Stat(base); err != nil {
		t.Skip("no testdata/torch/fsdp2: torch's FSDP2 checkpoint is not committed yet (scripts/gpu/run.sh writes it to $OUT/dcp-torch/fsdp2)")
	}
	for _, c := range []struct{ dir, expected string }{
		{"pytorch_model_fsdp_0", "expected_model.pt"},
		{"optimizer_0", "expected_optim.pt"},
	} {
		ck, err := Open(filepath.Join(base, c.dir))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ck.StateDict(ptfile.Options{})
		ck.Close()
		if err != nil {
			t.Fatal(err)
		}
		want, err := ptfile.Read(filepath.Join(base, c.expected), ptfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wd, ok := want.(*ptfile.Dict)
		if !ok {
			t.Fatalf("%s holds a %s", c.expected, ptfile.TypeName(want))
		}
		flat := func(d *ptfile.Dict) map[string]string {
			leaves, err := Flatten(d)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, l := range leaves {
				m[l.Key] = describe(l.Value)
			}
			return m
		}
		g, w := flat(got), flat(wd)
		if len(g) != len(w) {
			t.Fatalf("%s: %d keys, %s has %d", c.dir, len(g), c.expected, len(w))
		}
		for k, v := range w {
			if g[k] != v {
				t.Errorf("%s: %s is %s, want %s", c.dir, k, g[k], v)
			}
		}
	}
}
