package blas

import (
	"strings"

	"golang.org/x/sys/cpu"
)

// CoreTypeEnv is the environment variable that makes OpenBLAS's
// DYNAMIC_ARCH build use one kernel set instead of detecting it.
const CoreTypeEnv = "OPENBLAS_CORETYPE"

// Features are the CPU capabilities that decide which OpenBLAS kernels a
// CPU can run at full width.
type Features struct {
	AVX2, FMA                   bool
	AVX512F, AVX512VL, AVX512BW bool
	AVX512DQ, AVX512BF16        bool
}

// HostFeatures reads the features of the CPU this process runs on.
func HostFeatures() Features {
	x := cpu.X86
	return Features{
		AVX2: x.HasAVX2, FMA: x.HasFMA,
		AVX512F: x.HasAVX512F, AVX512VL: x.HasAVX512VL, AVX512BW: x.HasAVX512BW,
		AVX512DQ: x.HasAVX512DQ, AVX512BF16: x.HasAVX512BF16,
	}
}

// FeatureCore is the OpenBLAS core type whose kernels need exactly what f
// offers, or "" when f has no AVX2 with FMA (then OpenBLAS's own choice is
// as good as any): Cooperlake with AVX-512 BF16, SkylakeX with AVX-512
// F/VL/BW/DQ, Haswell with AVX2 and FMA. These are the cores OpenBLAS itself
// picks for the CPU models it knows with those features.
func FeatureCore(f Features) string {
	avx512 := f.AVX512F && f.AVX512VL && f.AVX512BW && f.AVX512DQ
	switch {
	case avx512 && f.AVX512BF16:
		return "COOPERLAKE"
	case avx512:
		return "SKYLAKEX"
	case f.AVX2 && f.FMA:
		return "HASWELL"
	}
	return ""
}

// fallbackCores are the core names OpenBLAS (0.3.x, DYNAMIC_ARCH) reports
// for x86-64 CPUs older than AVX: what its detection settles on when it does
// not know a CPU's family and model, as with the generic "Intel(R) Xeon(R)
// Processor" some virtual machines present. On such a CPU with AVX2 or
// AVX-512 its SGEMM runs several times slower than the hardware allows.
var fallbackCores = []string{"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine", "northwood", "banias", "opteron", "barcelona"}

// RetuneCore says which core type to switch an OpenBLAS library to: the
// feature core of f when the library's detected core (its corename) is a
// pre-AVX fallback while f offers AVX2 or more, and the user has not chosen
// one (env, the value of OPENBLAS_CORETYPE, is empty). Otherwise "".
func RetuneCore(corename, env string, f Features) string {
	if env != "" || corename == "" {
		return ""
	}
	want := FeatureCore(f)
	if want == "" {
		return ""
	}
	name := strings.ToLower(strings.TrimSpace(corename))
	for _, c := range fallbackCores {
		if name == c {
			return want
		}
	}
	return ""
}
