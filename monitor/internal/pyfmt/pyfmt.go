// Package pyfmt formats numbers as CPython prints them, so that text dszero
// writes (csv_monitor files, the comms table) reads as DeepSpeed's does.
package pyfmt

import (
	"math"
	"strconv"
	"strings"
)

// Repr is repr(x) (and str(x)) of a Python float: the shortest digits that
// round-trip, in fixed notation with at least one digit after the point when
// the decimal exponent is in [-4, 16), else in exponent notation with a
// signed exponent of at least two digits ("1e-05", "1.5e+16"); "inf", "-inf"
// and "nan" for the non-finite values.
func Repr(x float64) string {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	// Shortest round-trip digits d.ddd and exponent e: x = d.ddd × 10^e.
	s := strconv.FormatFloat(x, 'e', -1, 64)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	digits := strings.Replace(mant, ".", "", 1)
	// CPython's float_repr_style 'short' (PyOS_double_to_string with 'r'):
	// decpt is where the point goes after the first decpt digits.
	decpt := e + 1
	if decpt <= -4 || decpt > 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if e < 0 {
			es, e = "-", -e
		}
		ed := strconv.Itoa(e)
		if len(ed) < 2 {
			ed = "0" + ed
		}
		return sign + m + "e" + es + ed
	}
	switch {
	case decpt <= 0:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	case decpt >= len(digits):
		return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	default:
		return sign + digits[:decpt] + "." + digits[decpt:]
	}
}

// Round is round(x, ndigits) of a Python float: the double nearest the
// decimal x correctly rounded to ndigits places (ties to even on the exact
// binary value, which is what CPython's dtoa-based round does).
func Round(x float64, ndigits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', ndigits, 64), 64)
	return r
}
