package dsconfig

import (
	"fmt"
	"strings"
	"testing"
)

// TestHugeInputs: a config with 200k unknown keys is checked with one
// warning each, and a 5 MB key is named by its first characters only.
func TestHugeInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("a 200k-key config")
	}
	const n = 200000
	_, diags := compileString(t, manyKeys(n, ""), Options{WorldSize: 1})
	if got := diags.Count(Warning); got != n || diags.HasErrors() {
		t.Fatalf("%d warnings, want %d (errors: %v)", got, n, diags.HasErrors())
	}

	key := strings.Repeat("k", 5<<20)
	for _, src := range []string{
		`{"train_micro_batch_size_per_gpu": 1, "` + key + `": 1}`,                                             // unknown top-level key
		`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"` + key + `": 1}}`,                      // unknown key in a strict block
		`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "` + key + `"}}`,                         // unknown optimizer name
		`{"train_micro_batch_size_per_gpu": "` + key + `"}`,                                                   // a string for a count
		`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"` + key + `": 1}}}`, // an unknown kwarg
		`{"train_micro_batch_size_per_gpu": 1, "checkpoint": {"tag_validation": "` + key + `"}}`,              // an enum
		`{"train_micro_batch_size_per_gpu": 1, "` + key + `": {"a": ${x}}}`,                                   // a parse error inside it
		`{"train_micro_batch_size_per_gpu": 1, "` + key + `": 1, "` + key + `": 2}`,                           // a duplicate
		`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "offload_param": {"device": "` + key + `"}}}`,
	} {
		_, diags := compileString(t, src, Options{WorldSize: 1})
		if len(diags) == 0 {
			t.Fatalf("no diagnostics for %.80s", src)
		}
		for _, d := range diags {
			if s := d.String(); len(s) > 2000 || strings.Contains(s, strings.Repeat("k", 61)) {
				t.Errorf("a %d-byte diagnostic repeating the key: %.300s", len(s), s)
			}
		}
	}
}

// manyKeys is a config with n unknown keys, at the top level or inside
// block.
func manyKeys(n int, block string) string {
	var b strings.Builder
	b.WriteString(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}`)
	if block != "" {
		fmt.Fprintf(&b, `, %q: {"k": 0`, block)
	}
	for i := range n {
		fmt.Fprintf(&b, `, "key%d": %d`, i, i)
	}
	if block != "" {
		b.WriteString("}")
	}
	b.WriteString("}")
	return b.String()
}

// BenchmarkCompileManyKeys compiles configs of n unknown keys (each one a
// diagnostic with a did-you-mean) at the top level and in a strict block:
// the time per key should not grow with n. Run with -benchtime=3x.
func BenchmarkCompileManyKeys(b *testing.B) {
	for _, block := range []string{"", "zero_optimization"} {
		for _, n := range []int{50000, 200000} {
			data := []byte(manyKeys(n, block))
			name := fmt.Sprintf("top/keys=%d", n)
			if block != "" {
				name = fmt.Sprintf("%s/keys=%d", block, n)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					if _, diags := Compile("ds.json", data, Options{WorldSize: 1}); len(diags) < n {
						b.Fatalf("%d diagnostics", len(diags))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
			})
		}
	}
}
