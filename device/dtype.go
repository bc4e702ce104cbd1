package device

import (
	"fmt"

	"github.com/dszero/dszero/half"
)

// DType is the element type of a buffer, and the dtype a model trains in
// (dsconfig.Precision.DType). The zero value is F32.
type DType int

const (
	F32  DType = iota // float32; torch.float32
	F16               // IEEE 754 binary16 bit patterns; torch.float16
	BF16              // bfloat16 bit patterns; torch.bfloat16
	numDTypes
)

var dtypeNames = [...]string{"fp32", "fp16", "bf16"}

// ParseDType reads a DeepSpeed dtype name: "fp32", "fp16" or "bf16"
// (the names String returns; nothing else, not even "").
func ParseDType(s string) (DType, error) {
	for d, name := range dtypeNames {
		if name == s {
			return DType(d), nil
		}
	}
	return 0, fmt.Errorf("device: dtype %q: want fp32, fp16 or bf16", s)
}

// Size is the width of one element in bytes.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	panic(fmt.Sprintf("device: invalid DType %d", int(d)))
}

// Rounding is how float32 values become d's, in place: nil for F32 (no
// rounding), half.RoundF16 and half.RoundBF16 for the 16-bit dtypes (the
// Round of 16-bit emulation: a stage's working parameters, a model's ops).
func (d DType) Rounding() func([]float32) {
	switch d {
	case F32:
		return nil
	case F16:
		return half.RoundF16
	case BF16:
		return half.RoundBF16
	}
	panic(fmt.Sprintf("device: invalid DType %d", int(d)))
}

// Nearest is Rounding for one value: nil for F32, half.NearestF16 and
// half.NearestBF16 for the 16-bit dtypes.
func (d DType) Nearest() func(float32) float32 {
	switch d {
	case F32:
		return nil
	case F16:
		return half.NearestF16
	case BF16:
		return half.NearestBF16
	}
	panic(fmt.Sprintf("device: invalid DType %d", int(d)))
}

// String is the DeepSpeed name: "fp32", "fp16" or "bf16".
func (d DType) String() string {
	if d < 0 || d >= numDTypes {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return dtypeNames[d]
}

// Valid reports whether d is one of F32, F16 and BF16.
func (d DType) Valid() bool { return d >= 0 && d < numDTypes }

// MarshalText writes the DeepSpeed name, so that a plan's JSON holds
// "bf16", not a number. An invalid DType is an error.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("device: invalid DType %d", int(d))
	}
	return []byte(dtypeNames[d]), nil
}

// UnmarshalText reads what MarshalText writes (ParseDType).
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
