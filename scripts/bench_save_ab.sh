#!/usr/bin/env bash
# bench_save_ab.sh: two dszero binaries' checkpoint saves, interleaved with
# `dd oflag=direct` writing as many bytes to the same directory, ROUNDS
# times (issue 29: a save's throughput against the disk's, on a shared and
# noisy disk). For MODEL (default gpt2-medium) at ZeRO stage 3 on 2
# in-process ranks (fp32 AdamW, --steps 1 --seq 16). Prints each save's
# line, each dd's, the save ÷ dd ratio of each pair, and whether the two
# binaries' .pt files are byte-identical.
# Usage: scripts/bench_save_ab.sh DIR A_BIN B_BIN [MODEL] [ROUNDS]
# (build a binary of a commit with: git worktree add /tmp/wt COMMIT &&
# (cd /tmp/wt && go build -o /tmp/a ./cmd/dszero)).
set -euo pipefail
dir=${1:?usage: bench_save_ab.sh DIR A_BIN B_BIN [MODEL] [ROUNDS]}
a=${2:?A_BIN} b=${3:?B_BIN}
model=${4:-gpt2-medium} rounds=${5:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
for r in $(seq "$rounds"); do
	for v in a b; do
		bin=$a
		[ "$v" = b ] && bin=$b
		rm -rf "$dir/ck_$v"
		saved=$("$bin" train --model "$model" --deepspeed "$root/examples/ds_config_zero3.json" --nproc 2 --steps 1 --seq 16 \
			--data random --quiet --save "$dir/ck_$v" | grep '^saved ')
		echo "$v round $r: $saved"
		bytes=$(du -sb "$dir/ck_$v/global_step1" | awk '{print $1}')
		secs=$(sed -E 's/.*, ([0-9.]+) s\)$/\1/' <<<"$saved")
		mib=$(( (bytes + (16<<20) - 1) / (16<<20) ))
		rm -f "$dir/dd"
		ddw=$( { dd if=/dev/zero of="$dir/dd" bs=16M count=$mib oflag=direct conv=fsync 2>&1; } | tail -1)
		rm -f "$dir/dd"
		echo "  dd: $ddw"
		ds=$(awk '{for(i=1;i<=NF;i++) if($i=="s,") print $(i-1)}' <<<"$ddw")
		awk -v b="$bytes" -v s="$secs" -v d="$((mib*16*1048576))" -v ds="$ds" \
			'BEGIN{printf "  save %.0f MB/s, dd %.0f MB/s: ratio %.2f\n", b/s/1e6, d/ds/1e6, (b/s)/(d/ds)}'
	done
done
if cmp -s <(cd "$dir/ck_a" && find . -name '*.pt' | sort | xargs sha256sum) <(cd "$dir/ck_b" && find . -name '*.pt' | sort | xargs sha256sum); then
	echo "the .pt files are byte-identical"
else
	echo "the .pt files differ"
fi
