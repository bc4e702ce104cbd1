#!/usr/bin/env bash
# bench_load.sh: a checkpoint load's throughput beside dd's, measured back
# to back (issue 29). BenchmarkSaveLoad saves a stage-3 fp32 AdamW
# checkpoint of SIZE (default gpt2: 124M parameters, a 1.5 GB checkpoint;
# gpt2-medium: 355M, 4.3 GB) from 2 in-process ranks in DIR, drops its
# files from the page cache and loads it into fresh engines; right before
# and after, `dd iflag=direct` reads a file as large in DIR. ROUNDS times
# (default 3). Prints each round's figures and the ratio of the load's
# MB/s to the mean of its two dd reads.
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
ddread() { { dd if="$dir/dd" of=/dev/null bs=16M iflag=direct 2>&1; } | tail -1; }
mbps() { awk '{for(i=1;i<=NF;i++) if($i=="s,") printf "%.0f", $1/$(i-1)/1e6}' <<<"$1"; }
rm -f "$dir/dd"
for r in $(seq "$rounds"); do
	if [ ! -e "$dir/dd" ]; then
		# As large as the checkpoint: the first round's save says how large.
		out=$(bench)
		mb=$(awk '/load\//{for(i=1;i<=NF;i++) if($(i+1)=="MB") print $i}' <<<"$out")
		dd if=/dev/zero of="$dir/dd" bs=1M count="$(awk -v m="$mb" 'BEGIN{printf "%d", m*1e6/1048576+1}')" oflag=direct conv=fsync status=none
	fi
	echo "round $r: $(uptime)"
	before=$(ddread)
	out=$(bench)
	after=$(ddread)
	echo "$out"
	echo "dd read before: $before"
	echo "dd read after:  $after"
	load=$(awk '/load\//{for(i=1;i<=NF;i++) if($(i+1)=="MB/s") print $i}' <<<"$out")
	awk -v l="$load" -v a="$(mbps "$before")" -v b="$(mbps "$after")" \
		'BEGIN{printf "round: load %.0f MB/s, dd iflag=direct %.0f and %.0f MB/s: ratio %.2f\n", l, a, b, l/((a+b)/2)}'
done
rm -f "$dir/dd" "$test"
