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
	s := newBenchSetup(b, 4, 64, 3)
	rounds := benchEnv("DSZERO_BENCH_ROUNDS", 1)
	type variant struct{ name, zero string }
	variants := benchSelect(b, []variant{
		{"stage0", `"stage": 0`},
		{"stage2", `"stage": 2, "overlap_comm": true`},
		{"stage3", `"stage": 3, "overlap_comm": true`},
		{"stage3-noprefetch", `"stage": 3, "overlap_comm": true, "stage3_prefetch_bucket_size": 0`},
	}, 4, func(v variant) string { return v.name })
	if variants[0].name != "stage0" {
		b.Fatalf("DSZERO_BENCH_VARIANTS=%s: stage0 is the baseline every ratio needs", os.Getenv("DSZERO_BENCH_VARIANTS"))
	}
	for i := 0; i < b.N; i++ {
		median, peak := benchRounds(b, s, rounds, len(variants), func(j int) (string, []float64, int64) {
			v := variants[j]
			t, p := benchTrain(b, s, v.zero, "", false)
			return v.name, t, p
		})
		for _, v := range variants {
			b.ReportMetric(float64(peak[v.name])/(1<<20), v.name+"-peak-MiB")
		}
		for _, v := range variants[1:] {
			b.ReportMetric(median[v.name]/median["stage0"], v.name+"/stage0")
		}
		b.ReportMetric(median["stage0"], "stage0-s/step")
	}
}

// benchEnv is the positive integer in the environment variable k, or def.
func benchEnv(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// newBenchSetup reads DSZERO_BENCH_MODEL (a gpt preset, default gpt2),
// DSZERO_BENCH_RANKS, DSZERO_BENCH_SEQ and DSZERO_BENCH_STEPS (defaults
// world, seq, steps) and opens OpenBLAS with one thread.
func newBenchSetup(b *testing.B, world, seq, steps int) benchSetup {
	b.Helper()
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
	return benchSetup{preset: preset, mc: mc, corpus: data.Random(mc.Vocab, 1<<20, 1), gemm: gemm,
		world: benchEnv("DSZERO_BENCH_RANKS", world), seq: benchEnv("DSZERO_BENCH_SEQ", seq), steps: benchEnv("DSZERO_BENCH_STEPS", steps)}
}

// benchSelect is the variants DSZERO_BENCH_VARIANTS names (comma-separated,
// in all's order), or all[:def] when it is unset; an unknown name is fatal.
func benchSelect[V any](b *testing.B, all []V, def int, name func(V) string) []V {
	b.Helper()
	only := os.Getenv("DSZERO_BENCH_VARIANTS")
	if only == "" {
		return all[:def]
	}
	keep := strings.Split(only, ",")
	for _, k := range keep {
		if !slices.ContainsFunc(all, func(v V) bool { return name(v) == k }) {
			b.Fatalf("DSZERO_BENCH_VARIANTS=%s: no variant %q", only, k)
		}
	}
	return slices.DeleteFunc(slices.Clone(all), func(v V) bool { return !slices.Contains(keep, name(v)) })
}

// benchRounds runs variants 0..n-1 (run(j) trains variant j once and
// returns its name, timed step times and rank 0's peak) in rounds rounds,
// interleaved — round 1 runs each variant once, then round 2, … — so that
// a change of the machine's load meets every variant alike, and returns
// each variant's median step time over all its timed steps and its peak.
func benchRounds(b *testing.B, s benchSetup, rounds, n int, run func(j int) (string, []float64, int64)) (median map[string]float64, peak map[string]int64) {
	b.Helper()
	times := map[string][]float64{}
	peak = map[string]int64{}
	var names []string
	for round := 1; round <= rounds; round++ {
		for j := range n {
			name, got, p := run(j)
			if round == 1 {
				names = append(names, name)
			}
			times[name], peak[name] = append(times[name], got...), p
			b.Logf("round %d: %s %s on %d ranks, seq %d: steps %v s", round, s.preset, name, s.world, s.seq, got)
		}
	}
	median = map[string]float64{}
	for _, name := range names {
		t := slices.Sorted(slices.Values(times[name]))
		median[name] = t[len(t)/2]
		b.Logf("%s %s: median step %.3f s of %d; rank 0 peak %s", s.preset, name, median[name], len(t), mem.FormatBytes(peak[name]))
	}
	return median, peak
}

// benchSetup is what every run of a benchmark shares.
type benchSetup struct {
	preset            string
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
	s := newBenchSetup(b, 2, 128, 3)
	rounds := benchEnv("DSZERO_BENCH_ROUNDS", 2)
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
	variants := benchSelect(b, all, len(all)-1, func(v variant) string { return v.name })
	for i := 0; i < b.N; i++ {
		median, peak := benchRounds(b, s, rounds, len(variants), func(j int) (string, []float64, int64) {
			v := variants[j]
			t, p := benchTrain(b, s, v.zero, v.extra, v.fast)
			return v.name, t, p
		})
		for _, v := range variants {
			b.ReportMetric(float64(peak[v.name])/(1<<20), v.name+"-peak-MiB")
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
