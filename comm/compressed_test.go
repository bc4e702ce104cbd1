package comm

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPackSigns(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 33} {
		x := make([]float32, n)
		want := make([]float32, n)
		for i := range x {
			switch i % 5 {
			case 0:
				x[i], want[i] = -1.5, -1
			case 1:
				x[i], want[i] = 0, 1
			case 2:
				x[i], want[i] = float32(math.Copysign(0, -1)), 1 // torch.sign(-0) is 0: +1
			case 3:
				x[i], want[i] = float32(math.NaN()), 1 // sign(NaN)+1 is NaN, bool(NaN) is True
			default:
				x[i], want[i] = 2, 1
			}
		}
		w := PackSigns(x)
		if len(w) != (n+15)/16 {
			t.Fatalf("n=%d: %d words", n, len(w))
		}
		got := make([]float32, n)
		UnpackSigns(got, w)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("n=%d: %s", n, d)
		}
	}
}

func TestCompressedChunksAndWords(t *testing.T) {
	tests := []struct{ n, size, words int }{
		{0, 2, 2}, {1, 2, 3}, {16, 2, 3}, {32, 2, 3}, {33, 2, 4}, {48, 3, 3}, {4096, 4, 66},
	}
	for _, tc := range tests {
		if got := CompressedWords(tc.n, tc.size); got != tc.words {
			t.Errorf("CompressedWords(%d, %d) = %d, want %d", tc.n, tc.size, got, tc.words)
		}
		end := 0
		for j := range tc.size {
			lo, hi := CompressedChunk(tc.n, tc.size, j)
			if lo != end || hi < lo {
				t.Errorf("n=%d size=%d: chunk %d is [%d, %d)", tc.n, tc.size, j, lo, hi)
			}
			end = hi
		}
		if end != tc.n {
			t.Errorf("n=%d size=%d: chunks end at %d", tc.n, tc.size, end)
		}
	}
}

func TestSentSince(t *testing.T) {
	var before, after Traffic
	before.Record(KindAllReduce, Counts{Calls: 1, Sent: 100})
	after = before
	after.Record(KindAllReduce, Counts{Calls: 1, Sent: 40})
	after.Record(KindAllToAll, Counts{Calls: 2, Sent: 7})
	want := map[string]int64{"all_reduce": 40, "all_to_all": 7}
	if d := cmp.Diff(want, after.SentSince(before)); d != "" {
		t.Error(d)
	}
	if got := before.SentSince(before); got != nil {
		t.Errorf("nothing sent: %v", got)
	}
}
