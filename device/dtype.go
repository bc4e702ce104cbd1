package device

import "fmt"

// DType is the element type of a buffer.
type DType int

const (
	F32  DType = iota // float32; torch.float32
	F16               // IEEE 754 binary16 bit patterns; torch.float16
	BF16              // bfloat16 bit patterns; torch.bfloat16
	numDTypes
)

var dtypeNames = [...]string{"fp32", "fp16", "bf16"}

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

// String is the DeepSpeed name: "fp32", "fp16" or "bf16".
func (d DType) String() string {
	if d < 0 || d >= numDTypes {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return dtypeNames[d]
}

// Valid reports whether d is one of F32, F16 and BF16.
func (d DType) Valid() bool { return d >= 0 && d < numDTypes }
