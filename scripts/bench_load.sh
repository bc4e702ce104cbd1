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
# OFFLOAD (cpu or nvme; default none) offloads the optimizer state and the
# parameters: with nvme to swap files in DIR, which a load writes as it
# reads the files (the same bytes), so that the load is also compared
# with dd reading the bytes and then writing them (the sum of the two
# times). Each load's peak RSS is printed (the process's, 2 ranks: before
# the load, at its peak, and the difference).
# Usage: scripts/bench_load.sh DIR [SIZE [ROUNDS [OFFLOAD]]]   (DIR: on the
# disk to measure; it needs about 2.5x the checkpoint free, 3.5x with nvme)
set -euo pipefail
dir=${1:?usage: bench_load.sh DIR [SIZE [ROUNDS [OFFLOAD]]]}
size=${2:-gpt2}
rounds=${3:-3}
offload=${4:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
test="$dir/checkpoint.test"
(cd "$root" && go test -c -o "$test" ./checkpoint)
bench() {
	(cd "$root/checkpoint" && DSZERO_BENCH_DIR="$dir" DSZERO_BENCH_LARGE="$size" DSZERO_BENCH_OFFLOAD="$offload" \
		"$test" -test.run '^$' -test.bench "SaveLoad/(save|load)/$size\$" -test.benchtime 1x) | grep Benchmark
}
metric() { awk -v k="$1" -v u="$2" '$0 ~ k {for(i=1;i<=NF;i++) if($(i+1)==u) print $i}'; }
mbps() { awk '{for(i=1;i<=NF;i++) if($i=="s,") printf "%.0f", $1/$(i-1)/1e6}' <<<"$1"; }
secs() { awk '{for(i=1;i<=NF;i++) if($i=="s,") print $(i-1)}' <<<"$1"; }
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
	if [ "$offload" = nvme ]; then
		awk -v t="$(metric load/ s/op <<<"$out")" -v r="$(secs "$ddr")" -v w="$(secs "$ddw")" \
			'BEGIN{printf "round %d: (dd read %.2f s + dd write %.2f s of the same bytes) ÷ load %.2f s = %.2f (the load reads the files and writes the swap files)\n", '"$r"', r, w, t, (r+w)/t}'
	fi
	awk -v b="$(metric load/ rss-MB <<<"$out")" -v p="$(metric load/ load-peak-rss-MB <<<"$out")" -v x="$(metric load/ load-extra-rss-MB <<<"$out")" \
		'BEGIN{printf "round %d: load RSS %.0f MB before, %.0f MB at its peak: +%.0f MB (2 ranks)\n", '"$r"', b, p, x}'
done
rm -f "$test"
