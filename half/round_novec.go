//go:build purego || !amd64

package half

const (
	haveRoundVec = false
	haveF16C     = false
)

func roundBF16AVX2(x *float32, n int)    { panic("half: no vector rounding in this build") }
func roundF16AVX2(x *float32, n int) int { panic("half: no vector rounding in this build") }

func packBF16AVX2(dst *uint16, src *float32, n int) {
	panic("half: no vector conversion in this build")
}

func unpackBF16AVX2(dst *float32, src *uint16, n int) {
	panic("half: no vector conversion in this build")
}

func packF16F16C(dst *uint16, src *float32, n int) {
	panic("half: no vector conversion in this build")
}

func unpackF16F16C(dst *float32, src *uint16, n int) {
	panic("half: no vector conversion in this build")
}
