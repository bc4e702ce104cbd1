package pyfmt

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The wanted strings are what CPython 3.11 (/usr/bin/python3) prints for
// repr(x) and repr(round(x, n)).
func TestRepr(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{0.1, "0.1"},
		{1e-4, "0.0001"},
		{1e-5, "1e-05"},
		{0.00012345, "0.00012345"},
		{1.5e-5, "1.5e-05"},
		{123456789012345.6, "123456789012345.6"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{9999999999999998.0, "9999999999999998.0"},
		{2.3025851249694824, "2.3025851249694824"},
		{65536, "65536.0"},
		{1e100, "1e+100"},
		{5e-324, "5e-324"},
		{-2.5, "-2.5"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.MaxFloat32, "3.4028234663852886e+38"},
		{100, "100.0"},
		{12345.678, "12345.678"},
		{math.Inf(1), "inf"},
		{math.Inf(-1), "-inf"},
		{math.NaN(), "nan"},
	} {
		if got := Repr(tc.x); got != tc.want {
			t.Errorf("Repr(%v) = %q, want %q", tc.x, got, tc.want)
		}
	}
}

func TestRound(t *testing.T) {
	type in struct {
		x float64
		n int
	}
	var got []string
	for _, tc := range []in{{0.125, 2}, {0.375, 2}, {2.675, 2}, {678.8599999, 2}, {1023.999, 2}, {-0.001, 2}, {1.005, 2}} {
		got = append(got, Repr(Round(tc.x, tc.n)))
	}
	want := []string{"0.12", "0.38", "2.67", "678.86", "1024.0", "-0.0", "1.0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Repr(Round(x, n)) (-want +got):\n%s", diff)
	}
}
