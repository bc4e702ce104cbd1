package kernels

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed *.cu
var sources embed.FS

// files is the order the sources are concatenated in: the prelude first.
var files = []string{"prelude.cu", "elementwise.cu", "optim.cu", "norm.cu", "act.cu", "attn.cu", "loss.cu", "embed.cu"}

// ModuleName is the NVRTC program name of the kernels.
const ModuleName = "dszero_kernels.cu"

// Source returns the kernels as one translation unit.
func Source() string {
	var b strings.Builder
	for _, f := range files {
		data, err := sources.ReadFile(f)
		if err != nil {
			panic("kernels: " + err.Error()) // embedded at build time: cannot happen
		}
		fmt.Fprintf(&b, "// ---- %s ----\n", f)
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// Options are the NVRTC options for sm_XY (arch = 10*major + minor, e.g.
// 90): a real architecture, so NVRTC emits a CUBIN for this GPU and never
// PTX a driver might be too old to JIT; no contraction of a*b+c into an
// fma, so float results follow the source's roundings (the Go reference
// kernels' contract); IEEE division and square root and denormals kept
// (NVRTC's defaults, stated so a cache key shows them).
func Options(arch int) []string {
	return []string{
		fmt.Sprintf("--gpu-architecture=sm_%d", arch),
		"--fmad=false",
		"--prec-div=true",
		"--prec-sqrt=true",
		"--ftz=false",
		"--std=c++17",
		"-default-device",
	}
}

var kernelRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)`)

// Parse returns the extern "C" __global__ kernels declared in src, in
// source order.
func Parse(src string) []Spec {
	var out []Spec
	for _, m := range kernelRE.FindAllStringSubmatch(src, -1) {
		s := Spec{Name: m[1]}
		if strings.TrimSpace(m[2]) != "" {
			for _, p := range strings.Split(m[2], ",") {
				s.Params = append(s.Params, splitParam(p))
			}
		}
		out = append(out, s)
	}
	return out
}
