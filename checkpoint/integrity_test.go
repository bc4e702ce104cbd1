package checkpoint_test

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// loadRanks loads dir's latest checkpoint into fresh engines of plan and
// returns each rank's error.
func loadRanks(t *testing.T, plan dsconfig.Plan, d ztest.MLPData, dir string) []error {
	t.Helper()
	errs := make([]error, plan.WorldSize)
	inproc.New(plan.WorldSize, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &d.Layout, Init: d.Init, Workers: 1, Comm: c})
		if err != nil {
			errs[c.Rank()] = err
			return err
		}
		defer eng.Close()
		errs[c.Rank()] = checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &d.Layout, Comm: c})
		return errs[c.Rank()]
	})
	return errs
}

func mustPlan(t *testing.T, stage, world int) dsconfig.Plan {
	t.Helper()
	plan, err := ztest.Plan(stageJSON(stage, "fp32", 0), world)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// elementOffset is where element k of the tensor at path (a ptfile.Lookup
// path) of the .pt file lies in the file, and the storage entry holding it.
func elementOffset(t *testing.T, file, path string, k int64) (int64, string) {
	t.Helper()
	f, err := ptfile.Open(file, ptfile.Options{DeepSpeed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, err := ptfile.Get[*ptfile.Tensor](f.Root, path)
	if err != nil {
		t.Fatal(err)
	}
	entry := f.Archive + "/data/" + tn.Storage.Key
	fd, _ := os.Open(file)
	defer fd.Close()
	fi, _ := fd.Stat()
	zr, err := zip.NewReader(fd, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, zf := range zr.File {
		if zf.Name == entry {
			off, _ := zf.DataOffset()
			return off + (tn.Offset+k)*tn.DType.Size(), entry
		}
	}
	t.Fatalf("no entry %s", entry)
	return 0, ""
}

// wantAll checks that err is an error containing every one of subs.
func wantAll(t *testing.T, what string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	t.Logf("%s: %v", what, err)
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %v\ndoes not say %q", what, err, s)
		}
	}
}

// TestFlippedBitRefused: one flipped bit in a tensor entry of DeepSpeed's
// own ZeRO-2 checkpoint (no manifest, so no sha256 to catch it) — the
// lowest mantissa bit of fc1.bias[0] in rank 0's fp32 partition, a
// change in the eighth digit — fails dszero export, a load at the
// saved layout and a load resharded to another, each naming the entry
// whose CRC-32 no longer matches; nothing is written.
func TestFlippedBitRefused(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	dir := filepath.Join(t.TempDir(), "ckpt")
	copyTree(t, "testdata/ds_mlp_z2_fp32", dir)
	file := filepath.Join(dir, "global_step5", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
	fc1Bias := int64(d.Layout.Specs[1].Offset) // fc1.weight (64, 16), then fc1.bias
	if d.Layout.Specs[1].Name != "fc1.bias" {
		t.Fatalf("parameter 1 is %s", d.Layout.Specs[1].Name)
	}
	off, entry := elementOffset(t, file, "optimizer_state_dict.single_partition_of_fp32_groups[0]", fc1Bias)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	before := binary.LittleEndian.Uint32(b[off:])
	b[off] ^= 1
	t.Logf("fc1.bias[0] %v → %v in %s", f32(before), f32(binary.LittleEndian.Uint32(b[off:])), entry)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{file, entry, "checksum"}

	out := filepath.Join(t.TempDir(), "model.safetensors")
	_, err = checkpoint.Export(dir, out, checkpoint.ExportOptions{})
	wantAll(t, "export", err, want...)
	if _, serr := os.Stat(out); serr == nil {
		t.Errorf("export wrote %s", out)
	}
	for _, tc := range []struct {
		name         string
		stage, world int
	}{{"load", 2, 2}, {"reshard", 0, 1}} {
		errs := loadRanks(t, mustPlan(t, tc.stage, tc.world), d, dir)
		wantAll(t, tc.name+" (rank 0)", errs[0], want...)
	}
}

func f32(u uint32) float32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], u)
	var f float32
	binary.Read(bytes.NewReader(b[:]), binary.LittleEndian, &f)
	return f
}

// rewriteManifests recomputes the sizes and sha256 of the files every
// manifest in tagDir lists: what someone mixing files would do to get
// past the manifest check.
func rewriteManifests(t *testing.T, tagDir string) {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(tagDir, "dszero_manifest_rank_*.json"))
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var man map[string]any
		if err := json.Unmarshal(b, &man); err != nil {
			t.Fatal(err)
		}
		for _, e := range man["files"].([]any) {
			e := e.(map[string]any)
			data, err := os.ReadFile(filepath.Join(tagDir, e["name"].(string)))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			e["bytes"], e["sha256"] = len(data), hex.EncodeToString(sum[:])
		}
		b, _ = json.Marshal(man)
		if err := os.WriteFile(m, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func swapFiles(t *testing.T, a, b string) {
	t.Helper()
	tmp := a + ".swap"
	for _, r := range [][2]string{{a, tmp}, {b, a}, {tmp, b}} {
		if err := os.Rename(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMixedFilesRefused: files of different steps, or of two ranks
// swapped, with the manifests rewritten to match, are refused by a load at
// the saved layout, a resharding load and dszero export, each naming the
// file, what it says and what the checkpoint needs — for dszero's
// checkpoints, whose files carry their identity, and for DeepSpeed's, by
// what their files do record (param_slice_mappings, global_steps).
func TestMixedFilesRefused(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	saved := map[int]string{} // stage → a checkpoint directory with global_step2 and global_step3 (latest)
	for _, stage := range []int{2, 3} {
		saved[stage] = t.TempDir()
		if _, err := (mlpRun{from: 0, to: 3, dir: saved[stage], saveAt: []int{2, 3}}).run(mustPlan(t, stage, 2), d); err != nil {
			t.Fatal(err)
		}
	}
	optim := func(r int) string { return fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_optim_states.pt", r) }
	model3 := func(r int) string { return fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_model_states.pt", r) }
	for _, tc := range []struct {
		name   string
		src    string // the checkpoint to alter
		stage  int
		mix    func(dir, tag string) // alters dir/tag
		export bool                  // export reads the mixed file
		want   []string
	}{
		{"z2: rank 1's optimizer states from step 2", "", 2, func(dir, tag string) {
			copyFile(t, filepath.Join(dir, "global_step2", optim(1)), filepath.Join(dir, tag, optim(1)))
		}, true, []string{optim(1), "step 2", "global_steps 2, not 3", "mp_rank_00_model_states.pt"}},
		{"z2: ranks 0 and 1 swapped", "", 2, func(dir, tag string) {
			swapFiles(t, filepath.Join(dir, tag, optim(0)), filepath.Join(dir, tag, optim(1)))
		}, true, []string{optim(0), "says rank 1 of 2", "rank 1, not 0"}},
		{"z3: rank 1's files from step 2", "", 3, func(dir, tag string) {
			copyFile(t, filepath.Join(dir, "global_step2", optim(1)), filepath.Join(dir, tag, optim(1)))
			copyFile(t, filepath.Join(dir, "global_step2", model3(1)), filepath.Join(dir, tag, model3(1)))
		}, true, []string{"rank 1 of 2", "global_steps 2, not 3"}},
		{"z3: ranks 0 and 1 swapped", "", 3, func(dir, tag string) {
			swapFiles(t, filepath.Join(dir, tag, optim(0)), filepath.Join(dir, tag, optim(1)))
			swapFiles(t, filepath.Join(dir, tag, model3(0)), filepath.Join(dir, tag, model3(1)))
		}, true, []string{model3(0), "rank 1, not 0", "rank 0's manifest"}},
		{"DeepSpeed z2: ranks 0 and 1 swapped", "testdata/ds_mlp_z2_fp32", 2, func(dir, tag string) {
			swapFiles(t, filepath.Join(dir, tag, optim(0)), filepath.Join(dir, tag, optim(1)))
		}, true, []string{optim(0), "param_slice_mappings", "rank 0's of this model on 2 ranks places fc1.weight[0:1024]"}},
		{"DeepSpeed z3: rank 1's model states from step 4", "testdata/ds_mlp_z3_fp32", 3, func(dir, tag string) {
			p := filepath.Join(dir, tag, model3(1))
			v, err := ptfile.Read(p, ptfile.Options{DeepSpeed: true})
			if err != nil {
				t.Fatal(err)
			}
			v.(*ptfile.Dict).Set("global_steps", int64(4))
			if err := ptfile.Write(p, v); err != nil {
				t.Fatal(err)
			}
		}, false, []string{model3(1), "global_steps is 4", "says 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			src := tc.src
			if src == "" {
				src = saved[tc.stage]
			}
			copyTree(t, src, dir)
			tag, err := checkpoint.LatestTag(dir)
			if err != nil {
				t.Fatal(err)
			}
			tc.mix(dir, tag)
			rewriteManifests(t, filepath.Join(dir, tag))
			want := append([]string{"was copied in"}, tc.want...)
			for _, load := range []struct {
				name         string
				stage, world int
			}{{"load", tc.stage, 2}, {"reshard", 0, 1}} {
				err := errors.Join(loadRanks(t, mustPlan(t, load.stage, load.world), d, dir)...)
				wantAll(t, load.name, err, want...)
			}
			if tc.export {
				_, err := checkpoint.Export(dir, filepath.Join(t.TempDir(), "out.safetensors"), checkpoint.ExportOptions{})
				wantAll(t, "export", err, want...)
			}
		})
	}
}

// TestHugeStorageRefused: a storage entry that declares far more than the
// model needs — 2^30 float32 elements (4 GiB) in a deflated entry of a few
// bytes, in rank 1's optimizer states of DeepSpeed's ZeRO-2 checkpoint —
// is refused before it is inflated: the error is the declared size against
// what this model's checkpoint can hold, not what inflating finds. Export,
// which streams, fails on the entry without inflating more than it reads.
func TestHugeStorageRefused(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	dir := filepath.Join(t.TempDir(), "ckpt")
	copyTree(t, "testdata/ds_mlp_z2_fp32", dir)
	file := filepath.Join(dir, "global_step5", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
	v, err := ptfile.Read(file, ptfile.Options{DeepSpeed: true})
	if err != nil {
		t.Fatal(err)
	}
	// A partition of a distinctive length (70001 elements: BININT
	// 71 11 01 00 in the pickle), declared as 2^30 once written.
	osd, _ := ptfile.Get[*ptfile.Dict](v, "optimizer_state_dict")
	osd.Set("single_partition_of_fp32_groups", ptfile.List{ptfile.FromFloat32([]int64{70001}, make([]float32, 70001))})
	var buf bytes.Buffer
	if err := ptfile.Encode(&buf, "zero_pp_rank_1_mp_rank_00_optim_states", v); err != nil {
		t.Fatal(err)
	}
	zr, _ := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	var entry string
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		data, _ := io.ReadAll(rc)
		rc.Close()
		h := &zip.FileHeader{Name: zf.Name, Method: zip.Store, CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data))}
		if strings.HasSuffix(zf.Name, "/data.pkl") {
			data = bytes.Replace(data, []byte("J\x71\x11\x01\x00tQ"), []byte("J\x00\x00\x00\x40tQ"), 1)
			h.CRC32, h.CompressedSize64, h.UncompressedSize64 = crc32.ChecksumIEEE(data), uint64(len(data)), uint64(len(data))
		}
		if len(data) == 70001*4 {
			entry = zf.Name
			var z bytes.Buffer
			fw, _ := flate.NewWriter(&z, flate.BestSpeed)
			fw.Write(make([]byte, 1<<16))
			fw.Close()
			data = z.Bytes()
			h.Method, h.CompressedSize64, h.UncompressedSize64 = zip.Deflate, uint64(len(data)), 4<<30
		}
		w, err := zw.CreateRaw(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	zw.Close()
	if entry == "" {
		t.Fatal("no partition entry")
	}
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		stage, world int
	}{{"load", 2, 2}, {"reshard", 0, 1}} {
		err := errors.Join(loadRanks(t, mustPlan(t, tc.stage, tc.world), d, dir)...)
		wantAll(t, tc.name, err, file, entry, "declares 1073741824 float32 elements", "holds at most")
		if err != nil && strings.Contains(err.Error(), "inflat") {
			t.Errorf("%s: the entry was inflated: %v", tc.name, err)
		}
	}
	// Export streams; it finds the partition is not the model's.
	_, err = checkpoint.Export(dir, filepath.Join(t.TempDir(), "out.safetensors"), checkpoint.ExportOptions{})
	wantAll(t, "export", err, file)
}

// TestLoadFailureNamed: when one rank fails to load, the others say which
// rank failed at what — loading, not saving — and the failing rank says
// why.
func TestLoadFailureNamed(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	plan := mustPlan(t, 2, 2)
	dir := t.TempDir()
	runMLP(t, plan, d, 0, 1, dir, false, true)
	file := filepath.Join(dir, "global_step1", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
	b, _ := os.ReadFile(file)
	os.WriteFile(file, b[:len(b)/2], 0o644)
	errs := loadRanks(t, plan, d, dir)
	wantAll(t, "rank 1", errs[1], "zero_pp_rank_1_mp_rank_00_optim_states.pt")
	wantAll(t, "rank 0", errs[0], "rank 1 failed to load the latest checkpoint of "+dir)
	if errs[0] != nil && strings.Contains(errs[0].Error(), "save") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

// TestNonzeroPaddingRefused: a stage 1 or 2 optimizer-state tensor holds
// the partition's padding, which the engine's buffers (the ones a load
// reads into) do not: padding that is not zero — a file altered, or not
// written for this layout — fails the load, naming the file and the
// tensor.
func TestNonzeroPaddingRefused(t *testing.T) {
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage %d", stage), func(t *testing.T) {
			l := biasedLayout(2, 8, 8, 3) // 131 elements, padded to 132: rank 1's last
			plan := mustPlan(t, stage, 2)
			dir := t.TempDir()
			err := bigRanks(plan, &l, true, func(r int, eng *zero.Engine, c comm.Comm, _ *mem.Accountant) error {
				return checkpoint.Save(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c})
			})
			if err != nil {
				t.Fatal(err)
			}
			name := "zero_pp_rank_1_mp_rank_00_optim_states.pt"
			file := filepath.Join(dir, "global_step0", name)
			root, err := ptfile.Read(file, ptfile.Options{DeepSpeed: true})
			if err != nil {
				t.Fatal(err)
			}
			path := "optimizer_state_dict.base_optimizer_state.state[0].exp_avg_sq"
			tn, err := ptfile.Get[*ptfile.Tensor](root, path)
			if err != nil {
				t.Fatal(err)
			}
			if n := tn.Numel(); n != 66 {
				t.Fatalf("%s has %d elements, want rank 1's padded partition of 66", path, n)
			}
			last := (tn.Offset + tn.Numel() - 1) * 4
			if got := binary.LittleEndian.Uint32(tn.Storage.Data[last:]); got != 0 {
				t.Fatalf("the padding of %s saved is %v, not zero", path, f32(got))
			}
			binary.LittleEndian.PutUint32(tn.Storage.Data[last:], 0x3f800000) // 1.0
			if err := ptfile.Write(file, root); err != nil {
				t.Fatal(err)
			}
			rewriteManifests(t, filepath.Join(dir, "global_step0"))
			errs := make([]error, 2)
			inproc.New(2, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
				eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &l, Workers: 1, Comm: c, Init: make([]float32, l.Numel)})
				if err != nil {
					errs[c.Rank()] = err
					return err
				}
				defer eng.Close()
				errs[c.Rank()] = checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c})
				return errs[c.Rank()]
			})
			wantAll(t, "rank 1", errs[1], name, "state[0].exp_avg_sq", "66 elements", "not the partition's zero padding")
			wantAll(t, "rank 0", errs[0], "rank 1 failed to load")
		})
	}
}
