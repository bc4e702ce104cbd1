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
	// run trains one variant 1 + steps steps and returns its timed steps'
	// times and rank 0's peak device bytes.
	run := func(v variant) ([]float64, int64) {
		// Each run starts from a collected heap returned to the system,
		// as the first does: otherwise the next one's steps pay for
		// collecting and scavenging this one's buffers (the testing
		// package collects before each benchmark for the same reason).
		debug.FreeOSMemory()
		js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
		  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true}}, "zero_optimization": {%s}}`, v.zero)
		plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
		if err != nil {
			b.Fatal(err)
		}
		loader, err := data.NewLoader(corpus, data.Layout{B: 1, T: seq, GAS: 1, World: world})
		if err != nil {
			b.Fatal(err)
		}
		devs := make([]Device, world)
		for r := range devs {
			devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: gemm}
		}
		var times []float64
		var peak int64
		_, err = Run(Config{Plan: plan, Model: mc, Seed: 1, Batches: Tokens(loader, seq), SeqLen: seq, Steps: 1 + steps, Devices: devs, Workers: 1},
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
