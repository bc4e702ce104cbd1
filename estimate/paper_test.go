package estimate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestZeROPaperFigure1: the ZeRO paper's Figure 1 (Rajbhandari et al.,
// SC'20): Ψ = 7.5B, N_d = 64, K = 12, in GB of 10^9 bytes, printed with
// the figure's precision (one decimal).
func TestZeROPaperFigure1(t *testing.T) {
	want := []string{"120.0", "31.4", "16.6", "1.9"} // baseline, P_os, P_os+g, P_os+g+p
	var got []string
	for stage := range 4 {
		b, err := PaperAdam.PerRank(stage, 7.5e9, 64)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%.1f", b/1e9))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-paper +ours)\n%s", d)
	}
	if k := PaperAdam.K(); k != 12 {
		t.Errorf("K = %d, the paper's is 12", k)
	}
}

// TestZeROPaperTable1: the paper's Table 1, per-device memory of model
// states in GB for P_os, P_os+g, P_os+g+p at DP degrees 1 to 1024 and
// models of 7.5B, 128B and 1T parameters. The paper rounds some entries
// and truncates others (4187 for 4187.5, 41.3 for 41.25), so each entry
// must be within one unit of its last printed digit.
func TestZeROPaperTable1(t *testing.T) {
	table := []struct {
		dp   int
		cols [3]string // 7.5B, 128B, 1T; each "Pos Pos+g Pos+g+p"
	}{
		{1, [3]string{"120 120 120", "2048 2048 2048", "16000 16000 16000"}},
		{4, [3]string{"52.5 41.3 30", "896 704 512", "7000 5500 4000"}},
		{16, [3]string{"35.6 21.6 7.5", "608 368 128", "4750 2875 1000"}},
		{64, [3]string{"31.4 16.6 1.88", "536 284 32", "4187 2218 250"}},
		{256, [3]string{"30.4 15.4 0.47", "518 263 8", "4046 2054 62.5"}},
		{1024, [3]string{"30.1 15.1 0.12", "513 257 2", "4011 2013 15.6"}},
	}
	psis := [3]float64{7.5e9, 128e9, 1e12}
	for _, row := range table {
		for m, col := range row.cols {
			for i, s := range strings.Fields(col) {
				want, err := strconv.ParseFloat(s, 64)
				if err != nil {
					t.Fatal(err)
				}
				ulp := 1.0
				if dot := strings.IndexByte(s, '.'); dot >= 0 {
					ulp = math.Pow(10, -float64(len(s)-dot-1))
				}
				b, err := PaperAdam.PerRank(i+1, psis[m], row.dp)
				if err != nil {
					t.Fatal(err)
				}
				got := b / 1e9
				if math.Abs(got-want) > ulp*(1+1e-9) {
					t.Errorf("Ψ %g, DP %d, stage %d: %g GB, the paper prints %s", psis[m], row.dp, i+1, got, s)
				}
			}
		}
	}
}

// TestPerRankRefusesBadInput: a stage or world size a caller made up is an
// error, not a panic.
func TestPerRankRefusesBadInput(t *testing.T) {
	for _, tc := range []struct{ stage, n int }{{4, 8}, {-1, 8}, {2, 0}} {
		if _, err := PaperAdam.PerRank(tc.stage, 1e9, tc.n); err == nil {
			t.Errorf("PerRank(stage %d, %d ranks): no error", tc.stage, tc.n)
		}
	}
}
