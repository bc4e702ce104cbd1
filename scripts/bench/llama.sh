#!/usr/bin/env bash
# Tokens/s of dszero training Llama-family models beside plain PyTorch fp32 training of the same
# model (llama_torch.py), run back to back on this machine.
#
#   scripts/bench/llama.sh [OUT_DIR]      (from the repository root; default OUT_DIR /tmp/dszero-bench-llama)
#
# Models: the smollm2-135m and qwen2.5-0.5b presets (their config.json files in
# model/llama/testdata/hf_configs for PyTorch), randomly initialized, fp32, AdamW, one sample of
# SEQ tokens (default 128) per rank per step, uniform random token ids, STEPS steps (default 4),
# the first a warm-up left out of the mean. dszero runs ZeRO stage 0 and 3 on 1 and 2 in-process
# ranks (qwen2.5-0.5b's stage 0 on 2 ranks is left out unless ALL=1: two full fp32 AdamW copies
# need ~16 GB); PyTorch runs one process with THREADS threads (default 2, the cores here).
# dszero's tokens/s count every rank's tokens (the global batch). Prints a table, the load
# average before and after, and writes OUT_DIR/results.tsv.
set -euo pipefail
OUT=${1:-/tmp/dszero-bench-llama}
SEQ=${SEQ:-128}
STEPS=${STEPS:-4}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
go build -o "$OUT/dszero" ./cmd/dszero
echo "load before: $(uptime)"
res="$OUT/results.tsv"
printf "model\trun\ttokens_per_s\n" > "$res"

mean_log() { # the mean tokens_per_s of a --json-log's steps after the first
  /usr/bin/python3 -c 'import json,sys
r=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1])][1:]
print("%.1f" % (sum(r)/len(r)))' "$1"
}

for m in smollm2-135m qwen2.5-0.5b; do
  t=$(timeout 600 /usr/bin/python3 scripts/bench/llama_torch.py "model/llama/testdata/hf_configs/$m.json" \
      --seq "$SEQ" --steps "$STEPS" --threads "$THREADS" | /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["mean_after_first"])')
  printf "%s\tpytorch fp32, 1 process, %s threads\t%s\n" "$m" "$THREADS" "$t" | tee -a "$res"
  for run in "0 1" "0 2" "3 1" "3 2"; do
    set -- $run
    stage=$1 n=$2
    if [ "$m" = qwen2.5-0.5b ] && [ "$stage" = 0 ] && [ "$n" = 2 ] && [ "${ALL:-0}" != 1 ]; then continue; fi
    cfg="$OUT/z$stage.json"
    printf '{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}}, "zero_optimization": {"stage": %d}}\n' "$stage" > "$cfg"
    log="$OUT/$m-z$stage-n$n.jsonl"
    timeout 600 "$OUT/dszero" train --model "$m" --data random --seq "$SEQ" --steps "$STEPS" --deepspeed "$cfg" \
      --nproc "$n" --quiet --json-log "$log" > "$OUT/$m-z$stage-n$n.txt" 2>&1
    printf "%s\tdszero stage %s, %s rank(s)\t%s\n" "$m" "$stage" "$n" "$(mean_log "$log")" | tee -a "$res"
  done
done
echo "load after: $(uptime)"
