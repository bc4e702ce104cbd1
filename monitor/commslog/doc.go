// Package commslog is DeepSpeed's comms_logger: it records every collective
// a rank issues — which op, how many bytes, how long — and prints the
// per-op summary table that deepspeed.comm.log_summary() prints on rank 0:
//
//	Comm. Op            Message Size        Count               Total Latency(ms)   Avg Latency(ms)     tput_avg (Gbps)     busbw_avg (Gbps)
//	all_reduce
//	                    1.5 KB              2                   0.08                0.04                0.61                0.46
//	                    4.0 MB              11                  19.71               1.17                57.45               43.09
//
// One block per record name, in the order the names were first logged; one
// row per message size, smallest first. Every column is left-aligned in 20
// characters (a longer value just pushes the next one right) and every line
// keeps its trailing spaces, as Python's f"{x: <20}" writes them.
//
// # The numbers
//
// Message size is the byte count of the op's tensor argument as DeepSpeed
// measures it (element size × element count of the argument named
// "tensor", or the sum over a tensor list): for all_gather_into_tensor the
// local shard, for reduce_scatter_tensor the whole input, 0 for a barrier.
// It prints as DeepSpeed's convert_size does: the size in the largest
// 1024-power unit (B, KB, MB, ... YB) rounded to 2 places and printed as a
// Python float ("512.0 B", "678.86 MB"), and "0B" for zero.
//
// For each call with latency t (ms) and size s (bytes) on n ranks,
// algbw ("tput") and busbw in Gbps (bits/ms ÷ 1e6) are
//
//	all_reduce, all_reduce_coalesced, inference_all_reduce:
//	    algbw = 2s/t             busbw = (s/t) · 2(n-1)/n
//	all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor:
//	    algbw = ns/t             busbw = (ns/t) · (n-1)/n
//	all_to_all_single:
//	    algbw = s/t              busbw = (s/t) · (n-1)/n
//	send, recv, isend, irecv, broadcast, reduce, gather, scatter, barrier:
//	    algbw = busbw = s/t
//
// each times 8 and divided by 1e6, in that order of float operations.
// (For reduce_scatter_tensor s is already the whole input, so DeepSpeed's
// algbw counts it n times; the table keeps DeepSpeed's formula so the
// numbers compare.) Total latency is the sum of the calls' latencies; the
// average latency, tput_avg and busbw_avg are 10% trimmed means — sort,
// drop round(0.1·count) values (ties to even) from each end, take numpy's
// mean (pairwise summation) of the rest — so one slow warm-up call does not
// dominate.
//
// # What differs from DeepSpeed
//
// DeepSpeed times each op with a timer that it never resets and records the
// timer's total, so the k-th call of a record name is logged as the sum of
// the first k calls; its per-call latencies, totals and averages grow with
// the run. Here each call's own latency is recorded, which is what the
// column names say. An op whose latency is zero (too fast for the clock)
// gets bandwidth 0 where DeepSpeed would divide by zero, and an unknown op
// is an error where DeepSpeed prints "wrong comm_op specified" and exits.
// The straggler breakdown (log_summary(show_straggler=True)), which needs an
// all-reduce of every rank's latencies, is not printed.
//
// The reference is DeepSpeed 0.19.6 (commit edaa7221),
// deepspeed/utils/comms_logging.py, deepspeed/utils/timer.py (trim_mean)
// and deepspeed/comm/comm.py; testdata/summary.txt is what that code prints.
package commslog
