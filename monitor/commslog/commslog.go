package commslog

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dszero/dszero/monitor/internal/pyfmt"
)

// The op kinds, by DeepSpeed's names for them (deepspeed.comm function
// names); each picks a bandwidth formula.
const (
	AllReduce           = "all_reduce"
	AllReduceCoalesced  = "all_reduce_coalesced"
	InferenceAllReduce  = "inference_all_reduce"
	AllGather           = "all_gather"
	AllGatherIntoTensor = "all_gather_into_tensor"
	ReduceScatter       = "reduce_scatter"
	ReduceScatterTensor = "reduce_scatter_tensor"
	AllToAllSingle      = "all_to_all_single"
	Send                = "send"
	Recv                = "recv"
	ISend               = "isend"
	IRecv               = "irecv"
	Broadcast           = "broadcast"
	Reduce              = "reduce"
	Gather              = "gather"
	Scatter             = "scatter"
	Barrier             = "barrier"
)

// Bandwidth is DeepSpeed's calc_bw_log: the algorithmic and bus bandwidth in
// Gbps of one call of op moving msgBytes in latencyMS on world ranks. A
// latency of zero or less gives 0, 0.
func Bandwidth(op string, msgBytes int64, latencyMS float64, world int) (algbw, busbw float64, err error) {
	if world < 1 {
		return 0, 0, fmt.Errorf("commslog: world size %d, want at least 1", world)
	}
	if msgBytes < 0 {
		return 0, 0, fmt.Errorf("commslog: %s: message size %d bytes is negative", op, msgBytes)
	}
	n := float64(world)
	size := float64(msgBytes)
	d := latencyMS
	switch op {
	case AllToAllSingle:
		algbw = size / d
		busbw = (size / d) * ((n - 1) / n)
	case AllGather, AllGatherIntoTensor, ReduceScatter, ReduceScatterTensor:
		size = float64(msgBytes * int64(world))
		algbw = size / d
		busbw = (size / d) * ((n - 1) / n)
	case AllReduce, AllReduceCoalesced, InferenceAllReduce:
		algbw = float64(msgBytes*2) / d
		busbw = (size / d) * (2 * (n - 1) / n)
	case Send, Recv, ISend, IRecv, Broadcast, Reduce, Gather, Scatter, Barrier:
		algbw = size / d
		busbw = algbw
	default:
		return 0, 0, fmt.Errorf("commslog: unknown comm op %q: the table knows all_reduce, all_reduce_coalesced, inference_all_reduce, "+
			"all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all_single, send, recv, isend, irecv, "+
			"broadcast, reduce, gather, scatter and barrier", op)
	}
	if !(d > 0) { // DeepSpeed would divide by zero
		return 0, 0, nil
	}
	algbw *= 8
	busbw *= 8
	algbw /= 1e6
	busbw /= 1e6
	return algbw, busbw, nil
}

var sizeUnits = [...]string{"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}

// ConvertSize is DeepSpeed's convert_size: "0B", or the size in its largest
// 1024-power unit, rounded to 2 places, printed as a Python float and the
// unit ("512.0 B", "1.5 KB", "678.86 MB").
func ConvertSize(bytes int64) string {
	if bytes <= 0 {
		return "0B"
	}
	x := float64(bytes)
	i := int(math.Floor(math.Log(x) / math.Log(1024))) // Python's math.log(x, 1024)
	p := math.Pow(1024, float64(i))
	return pyfmt.Repr(pyfmt.Round(x/p, 2)) + " " + sizeUnits[i]
}

// trimMean is DeepSpeed's trim_mean(data, 0.1) without changing data: sort
// a copy, drop k = round(0.1·n) values (ties to even) from each end, and
// take numpy's mean of the rest.
func trimMean(data []float64) float64 {
	n := len(data)
	if n == 0 {
		return 0
	}
	s := slices.Clone(data)
	slices.Sort(s)
	k := int(math.RoundToEven(float64(n) * 0.1))
	s = s[k : n-k]
	return pairwiseSum(s) / float64(len(s))
}

// pairwiseSum is numpy's float64 add.reduce (pairwise_sum in
// numpy/core/src/umath/loops_utils.h.src, numpy 1.24): sequential below 8
// values, eight interleaved partial sums up to 128, halves (at a multiple
// of 8) above.
func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, x := range a {
			res += x
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range r {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
	}
}

// calls is one (record name, message size) cell: its calls' latencies and
// bandwidths.
type calls struct {
	latencyMS, algbw, busbw []float64
}

// Options configure a Logger.
type Options struct {
	WorldSize int // ranks in the group the ops run on (dist.get_world_size())
	// Verbose, when set, receives one line per Append, DeepSpeed's
	// comms_logger "verbose" output (which DeepSpeed logs on rank 0 only).
	Verbose io.Writer
	// Rank prefixes the verbose lines, "[Rank 0] comm op: ...", as
	// DeepSpeed's log_dist does.
	Rank int
}

// Logger accumulates one rank's comm ops. It is safe for concurrent use.
type Logger struct {
	o     Options
	mu    sync.Mutex
	names []string // record names in first-logged order
	cells map[string]map[int64]*calls
}

// New returns an empty Logger.
func New(o Options) (*Logger, error) {
	if o.WorldSize < 1 {
		return nil, fmt.Errorf("commslog: world size %d, want at least 1", o.WorldSize)
	}
	return &Logger{o: o, cells: map[string]map[int64]*calls{}}, nil
}

// Append records one call of op (which picks the bandwidth formula) under
// name (the table's row label, DeepSpeed's log_name; "" means op) that
// moved msgBytes in latency.
func (l *Logger) Append(op, name string, msgBytes int64, latency time.Duration) error {
	if name == "" {
		name = op
	}
	ms := float64(latency) / 1e6
	alg, bus, err := Bandwidth(op, msgBytes, ms, l.o.WorldSize)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	bySize, ok := l.cells[name]
	if !ok {
		bySize = map[int64]*calls{}
		l.cells[name] = bySize
		l.names = append(l.names, name)
	}
	c, ok := bySize[msgBytes]
	if !ok {
		c = &calls{}
		bySize[msgBytes] = c
	}
	c.latencyMS = append(c.latencyMS, ms)
	c.algbw = append(c.algbw, alg)
	c.busbw = append(c.busbw, bus)
	if l.o.Verbose != nil {
		fmt.Fprintf(l.o.Verbose, "[Rank %d] %s\n", l.o.Rank, VerboseLine(name, ms, msgBytes, alg, bus))
	}
	return nil
}

// VerboseLine is the line DeepSpeed's comms_logger logs for one op when
// "verbose" is on.
func VerboseLine(name string, latencyMS float64, msgBytes int64, algbw, busbw float64) string {
	return fmt.Sprintf("comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw (Gbps): %.2f",
		name, latencyMS, ConvertSize(msgBytes), algbw, busbw)
}

// Reset forgets every record (deepspeed.comm.reset_log).
func (l *Logger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = nil
	l.cells = map[string]map[int64]*calls{}
}

// Row is one line of the summary: one record name and message size.
type Row struct {
	Name           string
	MsgBytes       int64
	Count          int
	TotalLatencyMS float64
	AvgLatencyMS   float64 // 10% trimmed mean
	AlgbwGbps      float64 // tput_avg, 10% trimmed mean
	BusbwGbps      float64 // busbw_avg, 10% trimmed mean
}

// Summary is the table's rows: names in first-logged order, sizes ascending.
func (l *Logger) Summary() []Row {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rows []Row
	for _, name := range l.names {
		bySize := l.cells[name]
		sizes := make([]int64, 0, len(bySize))
		for s := range bySize {
			sizes = append(sizes, s)
		}
		slices.Sort(sizes)
		for _, s := range sizes {
			c := bySize[s]
			total := 0.0 // Python's sum(): left to right
			for _, v := range c.latencyMS {
				total += v
			}
			rows = append(rows, Row{
				Name: name, MsgBytes: s, Count: len(c.latencyMS), TotalLatencyMS: total,
				AvgLatencyMS: trimMean(c.latencyMS), AlgbwGbps: trimMean(c.algbw), BusbwGbps: trimMean(c.busbw),
			})
		}
	}
	return rows
}

// WriteSummary prints the table as deepspeed.comm.log_summary() does.
func (l *Logger) WriteSummary(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n",
		"Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)")
	last := ""
	for i, r := range l.Summary() {
		if i == 0 || r.Name != last {
			fmt.Fprintln(bw, r.Name)
			last = r.Name
		}
		fmt.Fprintf(bw, "%-20s%-20s%-20d%-20.2f%-20.2f%-20.2f%-20.2f\n",
			" ", ConvertSize(r.MsgBytes), r.Count, r.TotalLatencyMS, r.AvgLatencyMS, r.AlgbwGbps, r.BusbwGbps)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("commslog: write the comms summary: %w", err)
	}
	return nil
}
