package train

import (
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
)

// BenchmarkStages times one optimizer step of each ZeRO stage on the same
// model, ranks and batch, in one run, and reports each stage's median
// step time over stage 0's (a ratio: the machine is shared and noisy) and
// rank 0's peak device bytes. Stage 3 runs with DeepSpeed's defaults and
// with prefetch off (stage3_prefetch_bucket_size 0), so that the value of
// prefetch shows. overlap_comm is on at stages 2 and 3.
//
//	go test -run '^$' -bench Stages -benchtime 1x -timeout 60m ./train
//
// DSZERO_BENCH_MODEL (a gpt preset, default gpt2), DSZERO_BENCH_RANKS
// (default 4), DSZERO_BENCH_SEQ (default 64), DSZERO_BENCH_STEPS (timed
// steps after one warm-up step, default 3) and DSZERO_BENCH_ROUNDS
// (default 1) change the setup, and DSZERO_BENCH_VARIANTS (comma-separated
// names, stage0 among them) runs only those. With several rounds the
// variants run interleaved — round 1 runs each variant once, then round
// 2, … — and each variant's median is over all its timed steps, so that a
// change of the machine's load meets every variant alike.
func BenchmarkStages(b *testing.B) {
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
	preset := os.Getenv("DSZERO_BENCH_MODEL")
	if preset == "" {
		preset = "gpt2"
	}
	world, seq, steps := env("DSZERO_BENCH_RANKS", 4), env("DSZERO_BENCH_SEQ", 64), env("DSZERO_BENCH_STEPS", 3)
	rounds := env("DSZERO_BENCH_ROUNDS", 1)
	mc, err := gpt.Preset(preset)
	if err != nil {
		b.Fatal(err)
	}
	gemm, err := blas.New(blas.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	corpus := data.Random(mc.Vocab, 1<<20, 1)
	type variant struct{ name, zero string }
	variants := []variant{
		{"stage0", `"stage": 0`},
		{"stage2", `"stage": 2, "overlap_comm": true`},
		{"stage3", `"stage": 3, "overlap_comm": true`},
		{"stage3-noprefetch", `"stage": 3, "overlap_comm": true, "stage3_prefetch_bucket_size": 0`},
	}
	if only := os.Getenv("DSZERO_BENCH_VARIANTS"); only != "" {
		keep := strings.Split(only, ",")
		for _, k := range keep {
			if !slices.ContainsFunc(variants, func(v variant) bool { return v.name == k }) {
				b.Fatalf("DSZERO_BENCH_VARIANTS=%s: no variant %q", only, k)
			}
		}
		if !slices.Contains(keep, "stage0") {
			b.Fatalf("DSZERO_BENCH_VARIANTS=%s: stage0 is the baseline every ratio needs", only)
		}
		variants = slices.DeleteFunc(variants, func(v variant) bool { return !slices.Contains(keep, v.name) })
	}
	run := func(v variant) ([]float64, int64) {
		return benchTrain(b, benchSetup{mc, corpus, gemm, world, seq, steps}, v.zero, "", false)
	}
	for i := 0; i < b.N; i++ {
		times := map[string][]float64{}
		peak := map[string]int64{}
		for round := 1; round <= rounds; round++ {
			for _, v := range variants {
				got, p := run(v)
				times[v.name], peak[v.name] = append(times[v.name], got...), p
				b.Logf("round %d: %s %s on %d ranks, seq %d: steps %v s", round, preset, v.name, world, seq, got)
			}
		}
		median := map[string]float64{}
		for _, v := range variants {
			t := slices.Sorted(slices.Values(times[v.name]))
			median[v.name] = t[len(t)/2]
			b.Logf("%s %s: median step %.3f s of %d; rank 0 peak %s", preset, v.name, median[v.name], len(t), mem.FormatBytes(peak[v.name]))
			b.ReportMetric(float64(peak[v.name])/(1<<20), v.name+"-peak-MiB")
		}
		for _, v := range variants[1:] {
			b.ReportMetric(median[v.name]/median["stage0"], v.name+"/stage0")
		}
		b.ReportMetric(median["stage0"], "stage0-s/step")
	}
}

// benchSetup is what every run of a benchmark shares.
type benchSetup struct {
	mc                gpt.Config
	corpus            *data.Corpus
	gemm              blas.Engine
	world, seq, steps int
}

// benchTrain trains s.mc on s.world in-process ranks for 1 + s.steps
// steps with ds_config's zero_optimization body zero and the top-level
// keys extra ("" or `"bf16": {...}` and so on), on the fast or the exact
// path, and returns the timed steps' times and rank 0's peak device
// bytes.
func benchTrain(b *testing.B, s benchSetup, zero, extra string, fast bool) ([]float64, int64) {
	b.Helper()
	// Each run starts from a collected heap returned to the system,
	// as the first does: otherwise the next one's steps pay for
	// collecting and scavenging this one's buffers (the testing
	// package collects before each benchmark for the same reason).
	debug.FreeOSMemory()
	if extra != "" {
		extra = ", " + extra
	}
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
	  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true}}, "zero_optimization": {%s}%s}`, zero, extra)
	world, seq := s.world, s.seq
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		b.Fatal(err)
	}
	loader, err := data.NewLoader(s.corpus, data.Layout{B: 1, T: seq, GAS: 1, World: world})
	if err != nil {
		b.Fatal(err)
	}
	devs := make([]Device, world)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: s.gemm}
	}
	var times []float64
	var peak int64
	_, err = Run(Config{Plan: plan, Model: s.mc, Seed: 1, Batches: Tokens(loader, seq), SeqLen: seq, Steps: 1 + s.steps, Devices: devs, Workers: 1, FastMath: fast},
		func(r Record) error {
			if r.Step > 1 {
				times = append(times, r.StepTimeS)
			}
			peak = r.Peak["total"]
			return nil
		})
	if err != nil {
		b.Fatal(err)
	}
	return times, peak
}

// BenchmarkDTypes trains the same model, ranks and batch in fp32, bf16
// and fp16 (a static loss scale, so that no step is skipped) at ZeRO
// stages 0 and 3 on the fast path, in one run, interleaved by rounds as
// BenchmarkStages, and reports each 16-bit variant's tokens/s over fp32's
// at the same stage (bf16-z0/fp32-z0 and so on: ≥ 1 is as fast) and rank
// 0's peak device bytes. The variant bf16exact-z0 (torch's CPU bf16
// kernels, --math exact) runs only when DSZERO_BENCH_VARIANTS names it.
//
//	go test -run '^$' -bench DTypes -benchtime 1x -timeout 60m ./train
//
// DSZERO_BENCH_MODEL (default gpt2), DSZERO_BENCH_RANKS (default 2),
// DSZERO_BENCH_SEQ (default 128), DSZERO_BENCH_STEPS (default 3),
// DSZERO_BENCH_ROUNDS (default 2) and DSZERO_BENCH_VARIANTS (names,
// comma-separated) as in BenchmarkStages.
func BenchmarkDTypes(b *testing.B) {
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
	preset := os.Getenv("DSZERO_BENCH_MODEL")
	if preset == "" {
		preset = "gpt2"
	}
	mc, err := gpt.Preset(preset)
	if err != nil {
		b.Fatal(err)
	}
	gemm, err := blas.New(blas.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	s := benchSetup{mc: mc, corpus: data.Random(mc.Vocab, 1<<20, 1), gemm: gemm,
		world: env("DSZERO_BENCH_RANKS", 2), seq: env("DSZERO_BENCH_SEQ", 128), steps: env("DSZERO_BENCH_STEPS", 3)}
	rounds := env("DSZERO_BENCH_ROUNDS", 2)
	type variant struct {
		name, dtype, zero, extra string
		fast                     bool
	}
	bf16, fp16 := `"bf16": {"enabled": true}`, `"fp16": {"enabled": true, "loss_scale": 1024}`
	all := []variant{
		{"fp32-z0", "fp32", `"stage": 0`, "", true},
		{"bf16-z0", "bf16", `"stage": 0`, bf16, true},
		{"fp16-z0", "fp16", `"stage": 0`, fp16, true},
		{"fp32-z3", "fp32", `"stage": 3, "overlap_comm": true`, "", true},
		{"bf16-z3", "bf16", `"stage": 3, "overlap_comm": true`, bf16, true},
		{"fp16-z3", "fp16", `"stage": 3, "overlap_comm": true`, fp16, true},
		{"bf16exact-z0", "bf16", `"stage": 0`, bf16, false},
	}
	variants := all[:len(all)-1]
	if only := os.Getenv("DSZERO_BENCH_VARIANTS"); only != "" {
		keep := strings.Split(only, ",")
		for _, k := range keep {
			if !slices.ContainsFunc(all, func(v variant) bool { return v.name == k }) {
				b.Fatalf("DSZERO_BENCH_VARIANTS=%s: no variant %q", only, k)
			}
		}
		variants = slices.DeleteFunc(slices.Clone(all), func(v variant) bool { return !slices.Contains(keep, v.name) })
	}
	for i := 0; i < b.N; i++ {
		times := map[string][]float64{}
		median := map[string]float64{}
		for round := 1; round <= rounds; round++ {
			for _, v := range variants {
				got, peak := benchTrain(b, s, v.zero, v.extra, v.fast)
				times[v.name] = append(times[v.name], got...)
				b.Logf("round %d: %s %s on %d ranks, seq %d: steps %v s; rank 0 peak %s", round, preset, v.name, s.world, s.seq, got, mem.FormatBytes(peak))
				b.ReportMetric(float64(peak)/(1<<20), v.name+"-peak-MiB")
			}
		}
		for _, v := range variants {
			t := slices.Sorted(slices.Values(times[v.name]))
			median[v.name] = t[len(t)/2]
			b.Logf("%s %s: median step %.3f s of %d", preset, v.name, median[v.name], len(t))
			b.ReportMetric(median[v.name], v.name+"-s/step")
		}
		for _, v := range variants {
			base := "fp32-z" + v.name[len(v.name)-1:]
			if v.dtype == "fp32" || median[base] == 0 {
				continue
			}
			b.ReportMetric(median[base]/median[v.name], v.name+"/"+base)
		}
	}
}
