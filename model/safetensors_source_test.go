package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestSafetensorsReadAtSource: a tensor written from a ReadAt source —
// plain, and transposed over several blocks of rows — is the file written
// from the same values held whole in Data, byte for byte; the source is
// asked for every value once.
func TestSafetensorsReadAtSource(t *testing.T) {
	// (3, 2^21) in the file: readBlock / 2^21 = 2 rows a block, so the
	// transposed write takes two blocks; 6M values, more than one block.
	rows, cols := 3, 1<<21
	src := make([]float32, rows*cols) // the (cols, rows) source
	for i := range src {
		src[i] = float32(i%1000) + float32(i/1000)/1024
	}
	dir := t.TempDir()
	for _, tr := range []bool{false, true} {
		whole := Tensor{Name: "w", Shape: []int{rows, cols}, Data: src, Transpose: tr}
		reads := make([]int, len(src))
		streamed := Tensor{Name: "w", Shape: []int{rows, cols}, Transpose: tr, ReadAt: func(dst []float32, off int) error {
			for i := range dst {
				reads[off+i]++
			}
			copy(dst, src[off:off+len(dst)])
			return nil
		}}
		a, b := filepath.Join(dir, fmt.Sprint("whole", tr)), filepath.Join(dir, fmt.Sprint("streamed", tr))
		if err := WriteSafetensors(a, []Tensor{whole}, nil); err != nil {
			t.Fatal(err)
		}
		if err := WriteSafetensors(b, []Tensor{streamed}, nil); err != nil {
			t.Fatal(err)
		}
		wa, _ := os.ReadFile(a)
		wb, _ := os.ReadFile(b)
		if !bytes.Equal(wa, wb) {
			t.Errorf("transpose %v: the file written from ReadAt differs from the one written from Data", tr)
		}
		for i, n := range reads {
			if n != 1 {
				t.Fatalf("transpose %v: value %d read %d times", tr, i, n)
			}
		}
	}
}
