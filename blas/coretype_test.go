package blas

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

func TestFeatureCoreAndRetune(t *testing.T) {
	avx2 := Features{AVX2: true, FMA: true}
	skx := Features{AVX2: true, FMA: true, AVX512F: true, AVX512VL: true, AVX512BW: true, AVX512DQ: true}
	cpx := skx
	cpx.AVX512BF16 = true
	onlyF := Features{AVX2: true, FMA: true, AVX512F: true} // AVX-512 F without VL/BW/DQ (Knights Landing)
	tests := []struct {
		name      string
		corename  string
		env       string
		f         Features
		wantCore  string // FeatureCore(f)
		wantRetun string // RetuneCore(corename, env, f)
	}{
		{"generic VM Xeon with AVX-512 BF16", "Prescott", "", cpx, "COOPERLAKE", "COOPERLAKE"},
		{"fallback name with spaces and case", " prescott\n", "", skx, "SKYLAKEX", "SKYLAKEX"},
		{"Core2 fallback on AVX2", "Core2", "", avx2, "HASWELL", "HASWELL"},
		{"AVX-512 F alone is AVX2-class", "Prescott", "", onlyF, "HASWELL", "HASWELL"},
		{"detected correctly", "Cooperlake", "", cpx, "COOPERLAKE", ""},
		{"AMD Zen detected", "Zen", "", avx2, "HASWELL", ""},
		{"the user chose", "Prescott", "PRESCOTT", cpx, "COOPERLAKE", ""},
		{"old CPU: nothing better", "Prescott", "", Features{}, "", ""},
		{"not OpenBLAS", "", "", cpx, "COOPERLAKE", ""},
	}
	for _, tc := range tests {
		if got := FeatureCore(tc.f); got != tc.wantCore {
			t.Errorf("%s: FeatureCore = %q, want %q", tc.name, got, tc.wantCore)
		}
		if got := RetuneCore(tc.corename, tc.env, tc.f); got != tc.wantRetun {
			t.Errorf("%s: RetuneCore(%q, %q) = %q, want %q", tc.name, tc.corename, tc.env, got, tc.wantRetun)
		}
	}
}

// TestSwitchCore drives the mechanism retune uses — drop OpenBLAS's core and
// detect again under OPENBLAS_CORETYPE — on this machine's library: the core
// changes, GEMMs stay right, the environment is restored, and switching
// back works.
func TestSwitchCore(t *testing.T) {
	e, err := New(Options{Backend: OpenBLAS, Threads: 1})
	if err != nil {
		t.Skipf("no OpenBLAS: %v", err)
	}
	orig := corenameOf(e)
	if orig == "" {
		t.Skip("not a DYNAMIC_ARCH OpenBLAS")
	}
	if !HostFeatures().AVX2 || !HostFeatures().FMA {
		t.Skip("CPU without AVX2/FMA: Haswell kernels would not run")
	}
	t.Setenv(CoreTypeEnv, "keep-me")
	got, ok, err := switchCoreOf(e, "HASWELL")
	if !ok || err != nil {
		t.Fatalf("switchCoreOf: ok %v, err %v", ok, err)
	}
	defer func() {
		back, _, err := switchCoreOf(e, strings.ToUpper(orig))
		if err != nil || !strings.EqualFold(back, orig) {
			t.Errorf("switching back to %s: got %q, %v", orig, back, err)
		}
	}()
	if got != "Haswell" || corenameOf(e) != "Haswell" {
		t.Fatalf("after switching to HASWELL the core is %q (from %q)", got, orig)
	}
	if !strings.Contains(e.Description(), "Haswell") {
		t.Errorf("Description %q does not name the new core", e.Description())
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tA := range []bool{false, true} {
		check(t, e, r, gemmCase{tA, !tA, 130, 97, 300, 1.5, 0.75, 3})
	}
	if v := os.Getenv(CoreTypeEnv); v != "keep-me" {
		t.Errorf("%s = %q after the switch, want the caller's value restored", CoreTypeEnv, v)
	}
}
