package commslog

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The formulas by hand: 1e6 bytes in 1 ms is 1e6 B/ms = 8e9 bit/s = 8 Gbps.
func TestBandwidthByHand(t *testing.T) {
	type bw struct{ Alg, Bus float64 }
	for _, tc := range []struct {
		op    string
		bytes int64
		ms    float64
		world int
		want  bw
	}{
		// all_reduce: algbw 2s/t = 16; busbw s/t·2(n-1)/n = 8·6/4 = 12.
		{AllReduce, 1e6, 1, 4, bw{16, 12}},
		{AllReduceCoalesced, 1e6, 1, 4, bw{16, 12}},
		{InferenceAllReduce, 1e6, 1, 4, bw{16, 12}},
		// One rank moves nothing over the bus.
		{AllReduce, 1e6, 1, 1, bw{16, 0}},
		// all_gather_into_tensor: s is the shard, ×n = 1e6: 8, ·3/4 = 6.
		{AllGatherIntoTensor, 250e3, 1, 4, bw{8, 6}},
		{AllGather, 250e3, 1, 4, bw{8, 6}},
		// reduce_scatter_tensor: s is the whole input, still ×n: 32, 24.
		{ReduceScatterTensor, 1e6, 1, 4, bw{32, 24}},
		{ReduceScatter, 1e6, 1, 4, bw{32, 24}},
		// all_to_all_single: s/t = 8, ·(n-1)/n = 7 on 8 ranks.
		{AllToAllSingle, 1e6, 1, 8, bw{8, 7}},
		// Point to point and rooted ops: busbw = algbw = s/t; 2 ms halves it.
		{Broadcast, 1e6, 2, 4, bw{4, 4}},
		{Send, 1e6, 2, 2, bw{4, 4}},
		{Recv, 1e6, 2, 2, bw{4, 4}},
		{ISend, 1e6, 2, 2, bw{4, 4}},
		{IRecv, 1e6, 2, 2, bw{4, 4}},
		{Reduce, 1e6, 2, 2, bw{4, 4}},
		{Gather, 1e6, 2, 2, bw{4, 4}},
		{Scatter, 1e6, 2, 2, bw{4, 4}},
		{Barrier, 0, 0.5, 4, bw{0, 0}},
		// Too fast for the clock: DeepSpeed divides by zero; 0 here.
		{AllReduce, 1e6, 0, 4, bw{0, 0}},
	} {
		alg, bus, err := Bandwidth(tc.op, tc.bytes, tc.ms, tc.world)
		if err != nil {
			t.Errorf("%s: %v", tc.op, err)
			continue
		}
		if diff := cmp.Diff(tc.want, bw{alg, bus}, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
			t.Errorf("%s %d B %v ms on %d: (-want +got):\n%s", tc.op, tc.bytes, tc.ms, tc.world, diff)
		}
	}
	for _, bad := range []struct {
		op    string
		bytes int64
		world int
		want  string
	}{
		{"broadcast_object_list", 8, 4, `unknown comm op "broadcast_object_list"`},
		{AllReduce, -1, 4, "negative"},
		{AllReduce, 8, 0, "world size 0"},
	} {
		if _, _, err := Bandwidth(bad.op, bad.bytes, 1, bad.world); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Bandwidth(%q, %d, 1, %d) error %v, want %q", bad.op, bad.bytes, bad.world, err, bad.want)
		}
	}
}

// Wanted strings: DeepSpeed's convert_size under CPython 3.11.
func TestConvertSize(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{
		{0, "0B"},
		{1, "1.0 B"},
		{512, "512.0 B"},
		{1023, "1023.0 B"},
		{1024, "1.0 KB"},
		{1536, "1.5 KB"},
		{1048575, "1024.0 KB"},
		{1048576, "1.0 MB"},
		{1048577, "1.0 MB"},
		{711838105, "678.86 MB"},
		{2847352420, "2.65 GB"},
		{3000000000, "2.79 GB"},
		{1 << 40, "1.0 TB"},
		{1125899906842623, "1.0 PB"}, // 1024^5-1 rounds up to 1024^5 as a double
		{1 << 60, "1.0 EB"},
		{math.MaxInt64, "8.0 EB"},
	} {
		if got := ConvertSize(tc.bytes); got != tc.want {
			t.Errorf("ConvertSize(%d) = %q, want %q", tc.bytes, got, tc.want)
		}
	}
}

func TestTrimMean(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		// n=5: round(0.5) = 0 (ties to even), nothing trimmed.
		{[]float64{1, 2, 3, 4, 100}, 22},
		// n=6: round(0.6) = 1 from each end.
		{[]float64{100, 1, 2, 3, 4, -50}, 2.5},
		// n=15: round(1.5000000000000002) = 2.
		{[]float64{-9, -9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9, 9}, 1},
		// n=25: round(2.5) = 2, so one -7 and one 7 stay: (-7 + 19·2 + 7)/21
		// (k = 3 would give 2).
		{append([]float64{-7, -7, -7}, append(repeat(2, 19), 7, 7, 7)...), 38.0 / 21},
	} {
		if got := trimMean(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("trimMean(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// The input keeps its order: DeepSpeed's trim_mean sorts a copy, so the
	// latency, algbw and busbw lists stay aligned.
	in := []float64{3, 1, 2}
	trimMean(in)
	if diff := cmp.Diff([]float64{3, 1, 2}, in); diff != "" {
		t.Errorf("trimMean changed its input (-want +got):\n%s", diff)
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// numpy's pairwise summation differs from left-to-right summation in the
// last bits; these sums were printed by numpy 1.24 (np.add.reduce); for 130
// and 300 values Python's left-to-right sum() gives 5.448591338265977 and
// 6.282663880299502.
func TestPairwiseSumIsNumpys(t *testing.T) {
	var a []float64
	for i := 1; i <= 300; i++ {
		a = append(a, 1/float64(i))
	}
	for _, tc := range []struct {
		n    int
		want float64
	}{
		{7, 2.5928571428571425},
		{9, 2.8289682539682537},
		{130, 5.4485913382659765},
		{300, 6.282663880299504},
	} {
		if got := pairwiseSum(a[:tc.n]); got != tc.want {
			t.Errorf("pairwiseSum(1/1..1/%d) = %v, want numpy's %v", tc.n, got, tc.want)
		}
	}
}

type input struct {
	WorldSize int `json:"world_size"`
	Records   []struct {
		Op        string `json:"op"`
		Name      string `json:"name"`
		Bytes     int64  `json:"bytes"`
		LatencyNS int64  `json:"latency_ns"`
	} `json:"records"`
}

// testdata/summary.txt and verbose.txt are what DeepSpeed's CommsLogger
// printed for testdata/summary_input.json (testdata/gen_golden.py).
func TestSummaryMatchesDeepSpeed(t *testing.T) {
	b, err := os.ReadFile("testdata/summary_input.json")
	if err != nil {
		t.Fatal(err)
	}
	var in input
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	var verbose bytes.Buffer
	l, err := New(Options{WorldSize: in.WorldSize, Verbose: &verbose})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range in.Records {
		if err := l.Append(r.Op, r.Name, r.Bytes, time.Duration(r.LatencyNS)); err != nil {
			t.Fatal(err)
		}
	}
	var got bytes.Buffer
	if err := l.WriteSummary(&got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		file string
		got  string
	}{{"testdata/summary.txt", got.String()}, {"testdata/verbose.txt", verbose.String()}} {
		want, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(f.got, "\n")); diff != "" {
			t.Errorf("%s (-DeepSpeed +dszero):\n%s", f.file, diff)
		}
	}

	l.Reset()
	got.Reset()
	if err := l.WriteSummary(&got); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(got.String(), "\n"); n != 1 {
		t.Errorf("after Reset the summary has %d lines, want the header only", n)
	}
}

func TestAppendErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New with world size 0 succeeded")
	}
	l, err := New(Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append("all_to_all", "", 8, time.Millisecond); err == nil || !strings.Contains(err.Error(), `"all_to_all"`) {
		t.Errorf("Append of an unknown op: %v", err)
	}
	if err := l.Append(Barrier, "", 0, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{{Name: "barrier", Count: 1, TotalLatencyMS: 1, AvgLatencyMS: 1}}, l.Summary()); diff != "" {
		t.Errorf("an empty name is the op's (-want +got):\n%s", diff)
	}
}
