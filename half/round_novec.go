//go:build purego || !amd64

package half

const haveRoundVec = false

func roundBF16AVX2(x *float32, n int)    { panic("half: no vector rounding in this build") }
func roundF16AVX2(x *float32, n int) int { panic("half: no vector rounding in this build") }
