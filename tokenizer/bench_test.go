package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkEncode encodes Tiny Shakespeare (1.1 MB) per iteration; the MB/s
// column is the encoding speed, and MB/cpu-s the same per CPU-second of the
// process (the GC included). Run on one core with
//
//	go test -run '^$' -bench Encode -cpu 1 ./tokenizer
func BenchmarkEncode(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("..", "data", "tinyshakespeare.txt"))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range goldenTokenizers {
		for _, opt := range []options{{}, {genericRegex: true}} {
			label := name
			if opt.genericRegex {
				if name == "mistral" {
					continue // no regex
				}
				label += "-regexp2"
			}
			b.Run(label, func(b *testing.B) {
				tk := loadTestdata(b, name, opt)
				s := string(text)
				tk.Encode(s, false) // warm the word cache, as a long run would
				b.SetBytes(int64(len(s)))
				b.ResetTimer()
				cpu0, ok := cpuTime()
				for range b.N {
					tk.Encode(s, false)
				}
				if cpu1, _ := cpuTime(); ok && cpu1 > cpu0 {
					b.ReportMetric(float64(len(s))*float64(b.N)/1e6/(cpu1-cpu0).Seconds(), "MB/cpu-s")
				}
			})
		}
	}
}

// BenchmarkLoad parses a tokenizer.json (Qwen3: 151k tokens, 151k merges).
func BenchmarkLoad(b *testing.B) {
	tokJSON, cfgJSON := testdataFiles(b, "qwen3")
	b.ResetTimer()
	for range b.N {
		if _, err := FromJSON(tokJSON, cfgJSON, "qwen3", "config"); err != nil {
			b.Fatal(err)
		}
	}
}
