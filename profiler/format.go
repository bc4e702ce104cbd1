package profiler

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// The number formats of DeepSpeed's report (profiler.py's
// number_to_string and the helpers built on it, with their defaults:
// automatic units, precision 2). A value is scaled to the largest unit
// it reaches (T 1e12, G 1e9, M 1e6, K 1e3, none, m 1e-3, u 1e-6; 0 has
// none), rounded to two decimals the way Python's round does, and then
// printed as Python's "{:g}" does, which keeps six significant digits:
// 1234.5678 K prints "1234.57 K", 123456.78 T prints "123457 T".

// precision is DeepSpeed's DEFAULT_PRECISION, the decimals kept.
const precision = 2

// NumberToString is DeepSpeed's number_to_string(num): "3.54 M", "12 K",
// "0 " (no unit leaves a trailing space).
func NumberToString(num float64) string {
	var magnitude float64
	var units string
	switch {
	case num >= 1e12:
		magnitude, units = 1e12, "T"
	case num >= 1e9:
		magnitude, units = 1e9, "G"
	case num >= 1e6:
		magnitude, units = 1e6, "M"
	case num >= 1e3:
		magnitude, units = 1e3, "K"
	case num >= 1 || num == 0:
		magnitude, units = 1, ""
	case num >= 1e-3:
		magnitude, units = 1e-3, "m"
	default:
		magnitude, units = 1e-6, "u"
	}
	return pyG(pyRound(num/magnitude, precision)) + " " + units
}

// MACsToString is macs_to_string: "786.43 KMACs".
func MACsToString(macs int64) string { return NumberToString(float64(macs)) + "MACs" }

// FLOPSToString is flops_to_string: "1.2 GFLOPS".
func FLOPSToString(flops float64) string { return NumberToString(flops) + "FLOPS" }

// ParamsToString is params_to_string: the number without a trailing
// space and with billions as "B": "110.34 K", "1.24 B".
func ParamsToString(params int64) string {
	return strings.TrimSpace(strings.ReplaceAll(NumberToString(float64(params)), "G", "B"))
}

// DurationToString is duration_to_string for seconds: "1.23 ms".
func DurationToString(seconds float64) string { return NumberToString(seconds) + "s" }

// pyRound is Python's round(x, nd) for a float: the double nearest to x
// correctly rounded to nd decimals, ties to even.
func pyRound(x float64, nd int) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', nd, 64), 64)
	if err != nil {
		panic("profiler: pyRound: " + err.Error())
	}
	return r
}

// pyG is Python's format(x, "g"): six significant digits, trailing zeros
// dropped, an exponent below 1e-4 or from 1e6 on.
func pyG(x float64) string {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}

// percent is Python's 100 * a / b for integers: the exact quotient
// rounded once to a double (Python divides integers exactly). b > 0.
func percent(a, b int64) float64 {
	q := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(a), big.NewInt(100)), big.NewInt(b))
	f, _ := q.Float64()
	return f
}
