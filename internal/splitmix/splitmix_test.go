package splitmix

import "testing"

// The reference splitmix64 (Vigna, splitmix64.c) seeded with 0 starts
// 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f.
func TestKnownSequence(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	var x uint64
	for i, w := range want {
		x += Golden
		if got := Mix(x); got != w {
			t.Errorf("output %d = %#x, want %#x", i, got, w)
		}
	}
}
