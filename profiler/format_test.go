package profiler

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

// formatsGolden is testdata/formats.json: DeepSpeed's own helpers and
// Python's round/repr on a table of numbers (gen_golden.py).
type formatsGolden struct {
	NumberToString   [][2]any `json:"number_to_string"`
	MACsToString     [][2]any `json:"macs_to_string"`
	FLOPSToString    [][2]any `json:"flops_to_string"`
	ParamsToString   [][2]any `json:"params_to_string"`
	DurationToString [][2]any `json:"duration_to_string"`
	Repr             [][2]any `json:"repr"`
	Round2Repr       [][2]any `json:"round2_repr"`
}

func TestFormatsMatchDeepSpeed(t *testing.T) {
	raw, err := os.ReadFile("testdata/formats.json")
	if err != nil {
		t.Fatal(err)
	}
	var g formatsGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	check := func(name string, rows [][2]any, f func(x float64) string) {
		t.Helper()
		if len(rows) == 0 {
			t.Fatalf("%s: no rows in formats.json", name)
		}
		for _, r := range rows {
			x, want := r[0].(float64), r[1].(string)
			if got := f(x); got != want {
				t.Errorf("%s(%v) = %q, DeepSpeed/Python print %q", name, x, got, want)
			}
		}
	}
	check("number_to_string", g.NumberToString, NumberToString)
	check("macs_to_string", g.MACsToString, func(x float64) string { return MACsToString(int64(x)) })
	check("flops_to_string", g.FLOPSToString, FLOPSToString)
	check("params_to_string", g.ParamsToString, func(x float64) string { return ParamsToString(int64(x)) })
	check("duration_to_string", g.DurationToString, DurationToString)
	check("repr", g.Repr, func(x float64) string { return model.PyFloat(x, 64) })
	check("repr(round(x, 2))", g.Round2Repr, func(x float64) string { return model.PyFloat(pyRound(x, 2), 64) })
}

func TestFormatsByHand(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{NumberToString(0), "0 "},
		{NumberToString(28_611_840), "28.61 M"},
		{NumberToString(123_456.78e12), "123457 T"}, // {:g} keeps six digits
		{NumberToString(1.234567e18), "1.23457e+06 T"},
		{MACsToString(14_155_776), "14.16 MMACs"},
		{ParamsToString(1_235_814_400), "1.24 B"},
		{ParamsToString(128), "128"},
		{DurationToString(0.041_01), "41.01 ms"},
		{DurationToString(480.65e-6), "480.65 us"},
		{FLOPSToString(697.74e6), "697.74 MFLOPS"},
		{pyG(pyRound(percent(49_984, 110_336), 2)), "45.3"},
		{pyG(pyRound(percent(1, 3), 2)), "33.33"},
		{pyG(pyRound(percent(110_336, 110_336), 2)), "100"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// percent divides exactly: 100·a/b past 2⁵³ still rounds once.
	a, b := int64(9_007_199_254_740_993), int64(3)
	if d := cmp.Diff(300_239_975_158_033_100.0, percent(a, b)); d != "" {
		t.Errorf("percent(%d, %d): %s", a, b, d)
	}
}
