package device

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// unitBytes is the size of a unit ParseBytes accepts, compared
// case-insensitively: KB, MB, GB and TB are decimal (10^3 …), KiB, MiB, GiB
// and TiB binary (2^10 …).
func unitBytes(unit string) (int64, bool) {
	switch strings.ToLower(unit) {
	case "", "b":
		return 1, true
	case "kb":
		return 1e3, true
	case "mb":
		return 1e6, true
	case "gb":
		return 1e9, true
	case "tb":
		return 1e12, true
	case "kib":
		return 1 << 10, true
	case "mib":
		return 1 << 20, true
	case "gib":
		return 1 << 30, true
	case "tib":
		return 1 << 40, true
	}
	return 0, false
}

// ParseBytes reads a byte count such as "4GiB", "1.5 GB", "512MiB" or
// "1073741824" (a --device-memory value). The number may have a decimal
// fraction; the unit is one of B, KB, MB, GB, TB (powers of 1000) or KiB,
// MiB, GiB, TiB (powers of 1024), in any case, with or without a space. The
// result must be a whole number of bytes that fits an int64. A bare K, M, G
// or T is rejected as ambiguous.
func ParseBytes(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.TrimSpace(in[i:])
	if num == "" {
		return 0, fmt.Errorf("parse bytes %q: want a number followed by an optional unit, e.g. 4GiB", s)
	}
	if strings.Count(num, ".") > 1 || num == "." {
		return 0, fmt.Errorf("parse bytes %q: malformed number %q", s, num)
	}
	mult, ok := unitBytes(unit)
	if !ok {
		switch strings.ToLower(unit) {
		case "k", "m", "g", "t", "ki", "mi", "gi", "ti":
			u := strings.ToUpper(unit[:1])
			return 0, fmt.Errorf("parse bytes %q: unit %q is ambiguous; write %sB (powers of 1000) or %siB (powers of 1024)", s, unit, u, u)
		}
		return 0, fmt.Errorf("parse bytes %q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("parse bytes %q: malformed number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("parse bytes %q: %s bytes is not a whole number of bytes", s, r.FloatString(3))
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("parse bytes %q: more than %d bytes", s, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}
