#!/usr/bin/env bash
# bench_save.sh: what a checkpoint save costs, measured back to back in one
# run (issue 29). For MODEL (default gpt2-medium) at ZeRO stage 3 on 2
# in-process ranks (fp32 AdamW, --steps 1 --seq 16):
#   1. peak RSS of `dszero train` without and with --save (/usr/bin/time -v);
#   2. the save's throughput (the checkpoint's bytes over the save's time,
#      as dszero train prints it) beside `dd oflag=direct` writing as many
#      bytes to the same directory;
#   3. the load's throughput (BenchmarkSaveLoad's load/, reading what its
#      save/ wrote, from the disk) beside `dd iflag=direct` reading the dd
#      file back (of the 25M model; DSZERO_BENCH_LARGE=gpt2, gpt2-medium
#      or 1 adds larger ones; scripts/bench_load.sh measures loads round
#      by round).
# Usage: scripts/bench_save.sh DIR [MODEL]   (DIR: on the disk to measure;
# it needs about 3x the checkpoint free). Prints one line per figure and
# the load average before each.
set -euo pipefail
dir=${1:?usage: bench_save.sh DIR [MODEL]}
model=${2:-gpt2-medium}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
bin="$dir/dszero"
(cd "$root" && go build -o "$bin" ./cmd/dszero)
train=("$bin" train --model "$model" --deepspeed "$root/examples/ds_config_zero3.json" --nproc 2 --steps 1 --seq 16 --data random --quiet)
peak() { grep 'Maximum resident set size' "$1" | awk '{print $NF}'; }

echo "load: $(uptime)"
/usr/bin/time -v "${train[@]}" >"$dir/nosave.out" 2>"$dir/nosave.time"
echo "load: $(uptime)"
rm -rf "$dir/ck"
/usr/bin/time -v "${train[@]}" --save "$dir/ck" >"$dir/save.out" 2>"$dir/save.time"
a=$(peak "$dir/nosave.time") b=$(peak "$dir/save.time")
echo "peak RSS: without --save ${a} KiB, with --save ${b} KiB, ratio $(awk "BEGIN{printf \"%.3f\", $b/$a}")"
saved=$(grep '^saved ' "$dir/save.out")
echo "$saved"
bytes=$(du -sb "$dir/ck/global_step1" | awk '{print $1}')
secs=$(sed -E 's/.*, ([0-9.]+) s\)$/\1/' <<<"$saved")
echo "load: $(uptime)"
mib=$(( (bytes + (16<<20) - 1) / (16<<20) ))
ddw=$( { dd if=/dev/zero of="$dir/dd" bs=16M count=$mib oflag=direct conv=fsync 2>&1; } | tail -1)
echo "dd write: $ddw"
ddwsecs=$(awk '{for(i=1;i<=NF;i++) if($i=="s,") print $(i-1)}' <<<"$ddw")
awk -v b="$bytes" -v s="$secs" -v d="$((mib*16*1048576))" -v ds="$ddwsecs" \
	'BEGIN{printf "save %.0f MB/s, dd oflag=direct %.0f MB/s: ratio %.2f\n", b/s/1e6, d/ds/1e6, (b/s)/(d/ds)}'
ddr=$( { dd if="$dir/dd" of=/dev/null bs=16M iflag=direct 2>&1; } | tail -1)
echo "dd read: $ddr"
rm -f "$dir/dd"
echo "load: $(uptime)"
(cd "$root" && DSZERO_BENCH_DIR="$dir" DSZERO_BENCH_LARGE=${DSZERO_BENCH_LARGE:-} go test ./checkpoint -run '^$' -bench 'SaveLoad' -benchtime 1x) | grep Benchmark
