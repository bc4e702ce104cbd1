package commslog_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/dszero/dszero/monitor/commslog"
)

// Each rank records its collectives as they complete; rank 0 prints the
// table at the end of training, where a DeepSpeed script calls
// deepspeed.comm.log_summary().
func ExampleLogger_WriteSummary() {
	l, _ := commslog.New(commslog.Options{WorldSize: 2})
	// ZeRO-2 gradient reduction of two 64 MiB buckets, one parameter
	// all-gather of a 32 MiB shard and a barrier.
	l.Append(commslog.ReduceScatterTensor, "", 64<<20, 5*time.Millisecond)
	l.Append(commslog.ReduceScatterTensor, "", 64<<20, 7*time.Millisecond)
	l.Append(commslog.AllGatherIntoTensor, "", 32<<20, 4*time.Millisecond)
	l.Append(commslog.Barrier, "", 0, 20*time.Microsecond)
	var table strings.Builder
	l.WriteSummary(&table)
	// The table keeps DeepSpeed's trailing spaces; this example trims them
	// because example output cannot show them.
	for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		fmt.Println(strings.TrimRight(line, " "))
	}
	// Output:
	// Comm. Op            Message Size        Count               Total Latency(ms)   Avg Latency(ms)     tput_avg (Gbps)     busbw_avg (Gbps)
	// reduce_scatter_tensor
	//                     64.0 MB             2                   12.00               6.00                184.07              92.04
	// all_gather_into_tensor
	//                     32.0 MB             1                   4.00                4.00                134.22              67.11
	// barrier
	//                     0B                  1                   0.02                0.02                0.00                0.00
}
