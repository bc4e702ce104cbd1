#!/usr/bin/env bash
# bench_load.sh: a checkpoint load's throughput beside dd's, measured back
# to back (issue 29). Each round, dd writes a file as large as the
# checkpoint in DIR (oflag=direct conv=fsync) and reads it back
# (iflag=direct); then BenchmarkSaveLoad saves a stage-3 fp32 AdamW
# checkpoint of SIZE (default gpt2: 124M parameters, a 1.5 GB checkpoint;
# gpt2-medium: 355M, 4.3 GB) from 2 in-process ranks in DIR, drops its
# files from the guest's page cache and loads it into fresh engines. Both
# reads are of files just written, so a host's cache favours neither.
# Prints each round's figures and the ratios of the load's MB/s to dd's
# read, and of the save's to dd's write; ROUNDS rounds (default 3).
# Usage: scripts/bench_load.sh DIR [SIZE [ROUNDS]]   (DIR: on the disk to
# measure; it needs about 2.5x the checkpoint free)
set -euo pipefail
dir=${1:?usage: bench_load.sh DIR [SIZE [ROUNDS]]}
size=${2:-gpt2}
rounds=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
test="$dir/checkpoint.test"
(cd "$root" && go test -c -o "$test" ./checkpoint)
bench() {
	(cd "$root/checkpoint" && DSZERO_BENCH_DIR="$dir" DSZERO_BENCH_LARGE="$size" \
		"$test" -test.run '^$' -test.bench "SaveLoad/(save|load)/$size\$" -test.benchtime 1x) | grep Benchmark
}
metric() { awk -v k="$1" -v u="$2" '$0 ~ k {for(i=1;i<=NF;i++) if($(i+1)==u) print $i}'; }
mbps() { awk '{for(i=1;i<=NF;i++) if($i=="s,") printf "%.0f", $1/$(i-1)/1e6}' <<<"$1"; }
# The checkpoint's size, from a first save.
mb=$(bench | metric load/ MB)
n16=$(awk -v m="$mb" 'BEGIN{printf "%d", m*1e6/16777216+1}') # 16 MiB blocks
for r in $(seq "$rounds"); do
	echo "round $r: $(uptime)"
	ddw=$( { dd if=/dev/zero of="$dir/dd" bs=16M count="$n16" oflag=direct conv=fsync 2>&1; } | tail -1)
	ddr=$( { dd if="$dir/dd" of=/dev/null bs=16M iflag=direct 2>&1; } | tail -1)
	rm -f "$dir/dd"
	out=$(bench)
	echo "dd write: $ddw"
	echo "dd read:  $ddr"
	echo "$out"
	awk -v s="$(metric save/ MB/s <<<"$out")" -v l="$(metric load/ MB/s <<<"$out")" -v w="$(mbps "$ddw")" -v d="$(mbps "$ddr")" \
		'BEGIN{printf "round %d: load %.0f MB/s ÷ dd iflag=direct %.0f MB/s = %.2f; save %.0f MB/s ÷ dd oflag=direct %.0f MB/s = %.2f\n", '"$r"', l, d, l/d, s, w, s/w}'
done
rm -f "$test"
