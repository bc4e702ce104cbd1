package stage3_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/partition"
)

const mlpRef = "../model/mlp/testdata/"

// knobs are the stage 3 settings a variant changes.
type knobs struct {
	name                   string
	persist, prefetch      int64
	maxLive, reuse, subGrp int64
	overlap                bool
	keep                   bool // reshard_after_forward false
	minNum                 int  // size-based wrap
}

func (k knobs) json(stage, micro, gas int) string {
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},
  "zero_optimization": {"stage": %d, "overlap_comm": %v, "reduce_bucket_size": 1000,
    "stage3_param_persistence_threshold": %d, "stage3_prefetch_bucket_size": %d,
    "stage3_max_live_parameters": %d, "stage3_max_reuse_distance": %d, "sub_group_size": %d}
}`, micro, gas, stage, k.overlap, k.persist, k.prefetch, k.maxLive, k.reuse, k.subGrp)
}

// defaults are DeepSpeed's stage 3 defaults (every MLP parameter is
// persistent under them).
var defaults = knobs{name: "defaults", persist: 100000, prefetch: 50000000, maxLive: 1000000000, reuse: 1000000000, subGrp: 1000000000}

// variants gather every unit (persistence 0 or small) in every way.
func variants() []knobs {
	v := func(name string, f func(*knobs)) knobs {
		k := defaults
		k.name = name
		f(&k)
		return k
	}
	return []knobs{
		defaults,
		v("on-demand", func(k *knobs) { k.persist, k.prefetch, k.reuse = 0, 0, 0 }),
		v("prefetch", func(k *knobs) { k.persist, k.prefetch, k.reuse = 0, 1000, 0 }),
		v("prefetch-live-cap", func(k *knobs) { k.persist, k.prefetch, k.maxLive, k.reuse = 0, 100000, 1500, 0 }),
		v("reuse", func(k *knobs) { k.persist, k.prefetch = 0, 0 }),
		v("prefetch-reuse-overlap", func(k *knobs) { k.persist, k.overlap = 0, true }),
		v("some-persistent", func(k *knobs) { k.persist, k.prefetch, k.reuse = 100, 1000, 0 }),
		v("keep-after-forward", func(k *knobs) { k.persist, k.reuse, k.keep = 0, 0, true }),
		v("size-wrap", func(k *knobs) { k.persist, k.prefetch, k.reuse, k.minNum = 0, 2000, 0, 2000 }),
		v("sub-groups", func(k *knobs) { k.persist, k.prefetch, k.reuse, k.subGrp = 0, 1000, 0, 1000 }),
	}
}

func run(t *testing.T, d ztest.MLPData, js string, world int, k knobs) ztest.Run {
	t.Helper()
	plan, err := ztest.Plan(js, world)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ztest.RunMLPWith(plan, 4, lrsched.DeepSpeed0195, d, nil, func(o *zero.Options) {
		o.KeepAfterForward, o.WrapMinNumParams = k.keep, k.minNum
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestVariantsEqualStage2: every way of gathering (on demand, prefetch
// with and without a live cap, reuse, persistence, reshard_after_forward
// false, size-based wrapping, several sub-groups, overlap) on 1 to 4 ranks
// gives bit-identical losses and weights, and on 1 and 2 ranks they are
// stage 2's: the gathered values are the partitions' values, the gradient
// sums are the same sums, and with gradient_clipping 1.0 (never reached
// here) the norm's different float64 arithmetic changes no factor. On 3
// and 4 ranks stage 2's all-reduce adds in gloo's ring order, which
// follows each element's place in the bucket, and stage 3's
// reduce-scatter in rank order: there they agree within float32 rounding.
func TestVariantsEqualStage2(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for world := 1; world <= 4; world++ {
		base := run(t, d, defaults.json(2, 2, 2), world, defaults)
		first := run(t, d, defaults.json(3, 2, 2), world, defaults) // stage 3's own defaults
		if world <= 2 {
			first = base
		} else if lrel, wrel := fdiff.MaxRel(first.Losses, base.Losses), weightsRel(first.Final, base.Final); lrel > 1e-6 || wrel > 1e-6 {
			t.Errorf("world %d: stage 3 differs from stage 2 by more than float32 rounding: losses %.2e, weights %.2e", world, lrel, wrel)
		}
		for _, k := range variants() {
			t.Run(fmt.Sprintf("world%d/%s", world, k.name), func(t *testing.T) {
				got := run(t, d, k.json(3, 2, 2), world, k)
				if !slices.Equal(got.Losses, first.Losses) {
					t.Errorf("losses %v, want %v", got.Losses, first.Losses)
				}
				if abs, _ := fdiff.Weights(got.Final, first.Final); abs != 0 || !slices.Equal(got.Final, first.Final) {
					t.Errorf("final weights differ by up to %.2e", abs)
				}
				for i := range got.Stats {
					if rel := math.Abs(got.Stats[i].GradNorm-base.Stats[i].GradNorm) / base.Stats[i].GradNorm; rel > 1e-6 { // stage 2 rounds its norm to float32
						t.Errorf("step %d: grad norm %v, stage 2 %v", i+1, got.Stats[i].GradNorm, base.Stats[i].GradNorm)
					}
				}
				if len(got.Warns) > 0 {
					t.Errorf("warnings: %q", got.Warns)
				}
			})
		}
	}
}

// TestModelStates: a rank's model states are the ZeRO-3 formula — with
// Adam in fp32, 4 (master, which the working parameters are in fp32
// without offload; DeepSpeed keeps another 4 for a copy) + 4 (grads) + 8
// (moments) bytes per element of the rank's partitions — and the
// partitions are ceil(numel/N) per parameter, so the bytes scale as 1/N
// plus padding, from 1 to 8 ranks.
func TestModelStates(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	psi := int64(d.Layout.Numel)
	for world := 1; world <= 8; world++ {
		k := variants()[1]
		r := run(t, d, k.json(3, 2, 2), world, k)
		var part int64
		for _, sp := range d.Layout.Specs {
			part += int64((sp.Numel + world - 1) / world)
		}
		for rank, a := range r.Accts {
			s := a.Snapshot()
			got := map[mem.Category]int64{}
			want := map[mem.Category]int64{mem.Params16: 0, mem.MasterParams: 4 * part, mem.Grads: 4 * part, mem.OptimState: 8 * part}
			for c := range want {
				got[c] = s.PeakBytes(mem.Device, c)
			}
			for c, w := range want {
				if got[c] != w {
					t.Errorf("world %d rank %d: %v peak %d bytes, want %d", world, rank, c, got[c], w)
				}
			}
			total := 16 * part
			formula := 16 * psi / int64(world)
			t.Logf("world %d rank %d: model states %d bytes, formula (4+4+8)Ψ/N = %d (padding %d)", world, rank, total, formula, total-formula)
			if pad := total - formula; pad < 0 || pad >= 16*int64(len(d.Layout.Specs)) {
				t.Errorf("world %d: padding %d bytes is more than one element per parameter", world, pad)
			}
		}
	}
}

// TestGatheredPeak: without reuse, the gathered parameters never exceed
// the largest unit plus the prefetch bucket (plus the unit being landed)
// plus the persistent parameters, and with prefetch 0 the largest unit
// needed at once (a unit and the units it borrows).
func TestGatheredPeak(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	largest := 0
	for _, u := range d.Layout.Units {
		largest = max(largest, u.Numel)
	}
	for _, k := range variants()[1:4] {
		t.Run(k.name, func(t *testing.T) {
			r := run(t, d, k.json(3, 2, 2), 2, k)
			peak := r.Accts[0].Snapshot().PeakBytes(mem.Device, mem.Gathered) / 4
			bound := int64(largest) + k.prefetch + int64(largest)
			if k.prefetch == 0 {
				bound = int64(largest)
			}
			t.Logf("peak gathered %d elements (largest unit %d, prefetch bucket %d)", peak, largest, k.prefetch)
			if peak > bound || peak < int64(largest) {
				t.Errorf("peak gathered %d elements, want within [%d, %d]", peak, largest, bound)
			}
			if live := r.Accts[0].Snapshot().LiveBytes(mem.Device, mem.Gathered); live != 0 {
				t.Errorf("%d bytes still gathered after the run", live)
			}
		})
	}
}

// TestHybridSharding: MiCS (mics_shard_size 2 on 4 ranks; FSDP's
// HYBRID_SHARD is the same layout) shards within groups of 2 and
// replicates across them. It trains like one rank of stage 0 on the same
// global batches (losses within 1e-6 relative, weights within 1e-6 of
// their norm); each rank holds (4+4+4+8)·Ψ/2 bytes of model states (plus
// padding); the gathers and reduce-scatters stay inside the group, and
// across groups there is one all-reduce of the gradient partitions per
// step: 2·(R−1)/R × 4·P bytes sent with R = 2 groups and P elements per
// partition.
func TestHybridSharding(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	const world, group, steps = 4, 2, 4
	k := variants()[2] // persistence 0, prefetch
	js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, "mics_shard_size": 2,`, 1)
	base := run(t, d, defaults.json(0, 2, 2*world), 1, defaults)
	got := run(t, d, js, world, k)
	lrel := fdiff.MaxRel(got.Losses, base.Losses)
	wabs, wrel := fdiff.Weights(got.Final, base.Final)
	t.Logf("vs one rank: losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, wabs, wrel)
	if lrel > 1e-6 || wrel > 1e-6 {
		t.Errorf("hybrid sharding differs from one rank: losses %.2e, weights %.2e", lrel, wrel)
	}
	var part int64
	for _, sp := range d.Layout.Specs {
		part += int64((sp.Numel + group - 1) / group)
	}
	for r, a := range got.Accts {
		s := a.Snapshot()
		states := s.PeakBytes(mem.Device, mem.Params16) + s.PeakBytes(mem.Device, mem.MasterParams) +
			s.PeakBytes(mem.Device, mem.Grads) + s.PeakBytes(mem.Device, mem.OptimState)
		if states != 16*part { // fp32: the working partitions are the master
			t.Errorf("rank %d: model states %d bytes, want 16 × %d", r, states, part)
		}
		shard, repl := got.GroupTraffic[r][0], got.GroupTraffic[r][1]
		t.Logf("rank %d within its group:\n%sacross groups:\n%s", r, shard, repl)
		ar := repl.Of(comm.KindAllReduce)
		if ar.Calls != steps || ar.Sent != steps*4*part || repl.Total().Calls != steps {
			t.Errorf("rank %d across groups: %+v, want %d all-reduces sending %d bytes and nothing else", r, repl, steps, steps*4*part)
		}
		if shard.Of(comm.KindAllGather).Calls == 0 || shard.Of(comm.KindReduceScatter).Calls == 0 || shard.Of(comm.KindAllReduce).Calls != 0 {
			t.Errorf("rank %d within its group: %+v", r, shard)
		}
	}
}

// TestOffloadCPU: offload_optimizer cpu puts the fp32 master and
// gradient partitions and the optimizer state in the pinned-host tier,
// offload_param cpu the parameter partitions too (the persistent ones stay
// on the device); training is bit-identical to no offload.
func TestOffloadCPU(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	k := variants()[6] // some persistent parameters, prefetch
	base := run(t, d, k.json(3, 2, 2), 2, k)
	for _, off := range []string{`"offload_optimizer": {"device": "cpu"}`, `"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`} {
		js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, `+off+`,`, 1)
		js = strings.Replace(js, `"gradient_clipping": 1.0,`, `"gradient_clipping": 1.0, "zero_force_ds_cpu_optimizer": false,`, 1)
		got := run(t, d, js, 2, k)
		if !slices.Equal(got.Final, base.Final) || !slices.Equal(got.Losses, base.Losses) {
			t.Errorf("%s: training differs from no offload", off)
		}
		s := got.Accts[0].Snapshot()
		host := func(c mem.Category) int64 { return s.PeakBytes(mem.PinnedHost, c) }
		dev := func(c mem.Category) int64 { return s.PeakBytes(mem.Device, c) }
		b := base.Accts[0].Snapshot()
		for _, c := range []mem.Category{mem.MasterParams, mem.Grads, mem.OptimState} {
			if host(c) != b.PeakBytes(mem.Device, c) || dev(c) != 0 {
				t.Errorf("%s: %v on the host %d, on the device %d; want all %d on the host", off, c, host(c), dev(c), b.PeakBytes(mem.Device, c))
			}
		}
		// The baseline (fp32, no offload) keeps one buffer, the master,
		// which its working partitions are; with offload they are apart.
		p16 := b.PeakBytes(mem.Device, mem.MasterParams)
		if b.PeakBytes(mem.Device, mem.Params16) != 0 {
			t.Errorf("no offload: %d bytes of working partitions apart from the master", b.PeakBytes(mem.Device, mem.Params16))
		}
		if strings.Contains(off, "offload_param") {
			if host(mem.Params16) == 0 || host(mem.Params16)+dev(mem.Params16) != p16 || dev(mem.Params16) == 0 {
				t.Errorf("%s: parameter partitions %d on the host, %d on the device (persistent), of %d", off, host(mem.Params16), dev(mem.Params16), p16)
			}
		} else if dev(mem.Params16) != p16 {
			t.Errorf("%s: parameter partitions %d on the device, want %d", off, dev(mem.Params16), p16)
		}
	}
}

// TestOffloadNVMe: offload_optimizer nvme keeps each sub-group's fp32
// master and optimizer state in swap files between steps and reads one
// sub-group in at a time (the next read ahead while one steps); training
// is bit-identical to keeping them in memory, for Adam and for SGD with
// momentum (whose state appears at the first step), with one sub-group or
// several. The optimizer state in memory is the swap buffers plus two
// consecutive sub-groups' at most; the files are in the NVMe tier. A disk
// that fills up fails with an error naming the swap file.
func TestOffloadNVMe(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	k := variants()[9] // sub-groups of 1000 elements
	for _, opt := range []string{`"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}`,
		`"type": "SGD", "params": {"lr": 1e-2, "momentum": 0.9}`} {
		for _, sub := range []int64{1000, 1000000000} {
			k.subGrp = sub
			js := k.json(3, 2, 2)
			a := strings.Index(js, `"optimizer": {`)
			b := strings.Index(js, `"scheduler"`)
			js = js[:a] + `"zero_allow_untested_optimizer": true, "optimizer": {` + opt + `},` + "\n  " + js[b:]
			base := run(t, d, js, 2, k)
			js = strings.Replace(js, `"stage": 3,`, `"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/", "buffer_count": 2},`, 1)
			js = strings.Replace(js, `"gradient_clipping": 1.0,`, `"gradient_clipping": 1.0, "zero_force_ds_cpu_optimizer": false,`, 1)
			got := runSwapped(t, d, js)
			name := fmt.Sprintf("%.20s…/sub_group_size %d", opt, sub)
			if !slices.Equal(got.Final, base.Final) || !slices.Equal(got.Losses, base.Losses) {
				t.Errorf("%s: NVMe offload changed the training", name)
			}
			// In memory at once: the swap buffers (buffer_count 2 of the
			// largest sub-group, 4 KiB-aligned) and the state of the
			// sub-group stepping and of the next, read ahead.
			lay := partition.Stage3(params(d), 2, int(sub))
			largest, pair, states := 0, 0, int64(2)
			for g := range lay.SubGroups {
				largest = max(largest, lay.SubGroupNumel(g))
				pair = max(pair, lay.SubGroupNumel(g))
				if g > 0 {
					pair = max(pair, lay.SubGroupNumel(g-1)+lay.SubGroupNumel(g))
				}
			}
			if strings.Contains(opt, "SGD") {
				states = 1
			}
			pool := 2 * ((4*int64(largest) + 4095) / 4096 * 4096)
			s := got.Accts[0].Snapshot()
			if inMem, want := s.PeakBytes(mem.PinnedHost, mem.OptimState), pool+states*4*int64(pair); inMem != want || s.PeakBytes(mem.Device, mem.OptimState) != 0 {
				t.Errorf("%s: %d bytes of optimizer state in memory at once, want %d (buffers %d + two consecutive sub-groups of %d)", name, inMem, want, pool, pair)
			}
			if s.PeakBytes(mem.NVMe, mem.OptimState) < states*4*int64(lay.RankNumel) {
				t.Errorf("%s: %d bytes in the NVMe tier, want at least the state's %d", name, s.PeakBytes(mem.NVMe, mem.OptimState), states*4*int64(lay.RankNumel))
			}
		}
	}
	// The parameters too (persistence 0: every partition in a file).
	k = variants()[2]
	base := run(t, d, k.json(3, 2, 2), 2, k)
	js := strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/"},`, 1)
	got := runSwapped(t, d, js)
	if !slices.Equal(got.Final, base.Final) || !slices.Equal(got.Losses, base.Losses) {
		t.Errorf("offload_param nvme changed the training")
	}
	s := got.Accts[0].Snapshot()
	// The baseline (fp32, no offload) keeps its parameter partitions as
	// its fp32 master: that is what must now be on NVMe.
	if s.PeakBytes(mem.Device, mem.Params16) != 0 || s.PeakBytes(mem.NVMe, mem.Params16) < base.Accts[0].Snapshot().PeakBytes(mem.Device, mem.MasterParams) {
		t.Errorf("parameter partitions: %d bytes on the device, %d on NVMe", s.PeakBytes(mem.Device, mem.Params16), s.PeakBytes(mem.NVMe, mem.Params16))
	}

	// A full disk: writing a sub-group's state fails, naming the file.
	k = variants()[9]
	js = strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/"},`, 1)
	plan, err := ztest.Plan(js, 1)
	if err != nil {
		t.Fatal(err)
	}
	fsys := nvme.NewFaultFS(nvme.NewMemFS(0), nvme.Fault{Ops: nvme.OpWrite, Path: "subgroup0.exp_avg", Err: syscall.ENOSPC})
	_, err = ztest.RunMLPWith(plan, 2, lrsched.DeepSpeed0195, d, nil, func(o *zero.Options) { o.SwapFS = fsys })
	// (the whole run fails: a step cannot go on without its state)
	t.Logf("a full disk: %v", err)
	if err == nil || !strings.Contains(err.Error(), "subgroup0.exp_avg") || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a full disk: %v", err)
	}
}

// runSwapped trains the MLP 4 steps under js on 2 ranks, the NVMe swap
// files in memory.
func runSwapped(t *testing.T, d ztest.MLPData, js string) ztest.Run {
	t.Helper()
	plan, err := ztest.Plan(js, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ztest.RunMLPWith(plan, 4, lrsched.DeepSpeed0195, d, nil, func(o *zero.Options) { o.SwapFS = nvme.NewMemFS(0) })
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func params(d ztest.MLPData) []partition.Param {
	ps := make([]partition.Param, len(d.Layout.Specs))
	for i, sp := range d.Layout.Specs {
		ps[i] = partition.Param{Name: sp.Name, Numel: sp.Numel}
	}
	return ps
}

// TestHPZ: ZeRO++ hierarchical partitioning (zero_hpz_partition_size 2
// on 4 ranks) keeps, from each unit's forward gather, a secondary
// partition within the rank's group of 2 and gathers the unit for
// backward from there: training is bit-identical to plain stage 3 (the
// gathered values are the same), the secondary copy adds 4·Σ⌈numel/2⌉
// bytes of parameters at its peak, and the backward gathers leave the
// world communicator (fewer all-gathers there).
func TestHPZ(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	k := variants()[1] // on demand, persistence 0, no reuse: every unit gathered twice
	base := run(t, d, k.json(3, 2, 2), 4, k)
	got := run(t, d, strings.Replace(k.json(3, 2, 2), `"stage": 3,`, `"stage": 3, "zero_hpz_partition_size": 2,`, 1), 4, k)
	if !slices.Equal(got.Final, base.Final) || !slices.Equal(got.Losses, base.Losses) {
		t.Errorf("hpZ changed the training")
	}
	var secondary int64
	for _, sp := range d.Layout.Specs {
		secondary += 4 * int64((sp.Numel+1)/2)
	}
	for r := range got.Accts {
		p, b := got.Accts[r].Snapshot().PeakBytes(mem.Device, mem.Params16), base.Accts[r].Snapshot().PeakBytes(mem.Device, mem.Params16)
		if p != b+secondary {
			t.Errorf("rank %d: parameters peak at %d bytes, want %d + the secondary copy %d", r, p, b, secondary)
		}
		hg, bg := got.Traffic[r].Of(comm.KindAllGather), base.Traffic[r].Of(comm.KindAllGather)
		t.Logf("rank %d: all-gathers on the world communicator %d (%d bytes sent), without hpZ %d (%d)", r, hg.Calls, hg.Sent, bg.Calls, bg.Sent)
		if hg.Calls >= bg.Calls || hg.Sent >= bg.Sent {
			t.Errorf("rank %d: hpZ left %d all-gathers on the world communicator, plain stage 3 has %d", r, hg.Calls, bg.Calls)
		}
	}
}

// weightsRel is ‖a−b‖₂/‖b‖₂.
func weightsRel(a, b []float32) float64 {
	_, rel := fdiff.Weights(a, b)
	return rel
}
