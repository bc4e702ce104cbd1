#!/usr/bin/env bash
# run.sh — runs on the GPU machine (one H200), from the repository root,
# with .gpu/ built by scripts/gpu/build.sh. Needs no Go. Every step runs
# under its own `timeout`, cheapest first, and writes into $OUT as it goes,
# so whatever finished is there even if a later step hangs or the machine
# is taken back. The last step prints a one-screen summary
# ($OUT/summary.txt).
#
#   OUT=/tmp/out scripts/gpu/run.sh
#
# Environment: DSZERO_CUDA_LIB_DIR (folders searched first for the CUDA
# libraries, like --cuda-lib-dir), STEP_SCALE (multiplies every timeout).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu/out}
mkdir -p "$OUT"
SCALE=${STEP_SCALE:-1}
SUMMARY="$OUT/summary.txt"
: > "$OUT/steps.tsv"

# step NAME SECONDS COMMAND...: runs COMMAND with a timeout, output to
# $OUT/NAME.log, and records status and time in steps.tsv.
step() {
	local name=$1 secs=$2
	shift 2
	local start end rc
	start=$(date +%s%N)
	echo "== $name (timeout $((secs * SCALE))s)" | tee -a "$OUT/progress.log"
	timeout --kill-after=10 $((secs * SCALE)) "$@" > "$OUT/$name.log" 2>&1
	rc=$?
	end=$(date +%s%N)
	local status=ok
	case $rc in
	0) status=ok ;;
	124 | 137) status=TIMEOUT ;;
	*) status="FAIL($rc)" ;;
	esac
	printf '%s\t%s\t%s\n' "$name" "$status" "$(awk "BEGIN { printf \"%.1f\", ($end - $start) / 1e9 }")" >> "$OUT/steps.tsv"
	echo "   $status" | tee -a "$OUT/progress.log"
	return 0
}

todo() { # todo NAME WHAT: a step not built yet, recorded as such
	printf '%s\tTODO\t0\n' "$1" >> "$OUT/steps.tsv"
	echo "TODO: $2" > "$OUT/$1.log"
}

if [ ! -x .gpu/cuda.test ]; then
	echo "no .gpu/cuda.test: run scripts/gpu/build.sh on the development machine first" >&2
	exit 2
fi
cp .gpu/REVISION "$OUT/" 2>/dev/null

# 1. Facts, about 10 s: which GPU (700 W power limit is SXM, 600 W NVL),
# driver, and which CUDA libraries the loader will find.
facts() {
	nvidia-smi --query-gpu=name,power.limit,memory.total,clocks.max.sm,driver_version,compute_cap --format=csv || return 1
	nvidia-smi
	echo "--- ldconfig"
	ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libcublasLt|libnccl' || echo "(none in ld.so.cache)"
	echo "--- python wheels"
	for py in python3 /usr/bin/python3; do
		command -v "$py" >/dev/null || continue
		"$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()]
print(sys.executable, sys.version.split()[0])
for d in dirs:
    for lib in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "lib*.so*"))):
        if any(k in lib for k in ("nvrtc", "cublasLt", "cudart", "nccl")):
            print("  ", lib)
PY
	done
	echo "--- torch"
	python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
	echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	echo "DSZERO_CUDA_LIB_DIR=${DSZERO_CUDA_LIB_DIR:-}"
	return 0
}
step facts 30 bash -c "$(declare -f facts); facts"

# 1b. torch.distributed.checkpoint interop, about 60 s, on the CPU (no
# GPU needed; issue 30): torch's dcp.save writes the fixture of
# checkpoint/dcp/testdata/spec.json on 1 and 3 ranks and an FSDP2 model's
# Accelerate-style checkpoint into $OUT/dcp-torch (copy them into
# checkpoint/dcp/testdata/torch/ to commit: TestReadTorch reads them), and
# dcp.load reads dszero's checkpoints (checkpoint/dcp/testdata/dszero/w3 in
# FSDP's row chunks, dszero/flat3 in ZeRO's flat chunks as --output_dir's
# SHARDED_STATE_DICT saves write them) on 1 and 2 ranks and through
# dcp_to_torch_save.
step dcp-interop 240 env CUDA_VISIBLE_DEVICES= python3 checkpoint/dcp/testdata/gen/torch_dcp.py all "$OUT/dcp-torch" checkpoint/dcp/testdata/dszero/w3 checkpoint/dcp/testdata/dszero/flat3

# 2. The package's GPU tests, about 60 s: open the device, memory round
# trips, NVRTC build of every kernel for this GPU (the cache goes to
# $OUT), each kernel against the Go reference kernels (fp32, bf16, fp16;
# bit for bit except the transcendental ones), GEMM shapes against a CPU
# GEMM (and TF32 off), and a faulting kernel failing the device (in a
# child process).
export DSZERO_CUDA_CACHE="$OUT/kernel-cache"
step gpu-tests 300 .gpu/cuda.test -test.run 'GPU' -test.v -test.timeout 280s
# The same build again: now a cache hit, no compilation.
step kernel-cache 60 .gpu/cuda.test -test.run 'TestGPUKernelsBuild$' -test.v

# 2b. NCCL at world 1, about 20 s (issue 26): package comm/nccl on the real
# libnccl (found as nccl.Load finds it: DSZERO_CUDA_LIB_DIR, LD_LIBRARY_PATH,
# the loader cache, system folders, a Python wheel's nvidia/nccl/lib) and
# GPU 0: commtest's conformance suite through the staged host path, a
# split, and a group on device memory with a PreMulSum all-reduce ordered
# after an event. One GPU cannot hold two NCCL ranks; the multi-rank logic
# is tested on the fake NCCL everywhere. Without libnccl 2.18+ the tests
# skip ("no NCCL:" in the log).
if [ -x .gpu/nccl.test ]; then
	step nccl-world1 120 .gpu/nccl.test -test.run 'GPU' -test.v -test.timeout 100s
else
	todo nccl-world1 "no .gpu/nccl.test: rebuild with scripts/gpu/build.sh"
fi

# 3. TODO (issue 25, after the engine's Ops interface, issue 19): train
# parity, `dszero train --device cuda` on tiny/small, 10 steps, stages 0
# and 3, fp32 and bf16, one with offload_optimizer cpu, losses against the
# CPU reference JSON in .gpu/ref/.
todo train-parity "dszero train --device cuda --model tiny|small --steps 10, ZeRO 0 and 3, fp32/bf16, + offload_optimizer cpu; compare with .gpu/ref/*.json (needs the CUDA Ops implementation)"

# 4. TODO: throughput, `dszero bench --device cuda --model gpt2 --seq 1024`,
# bf16, 30 steps: tokens/s, MFU, reserved vs allocated, launches per step.
todo bench "dszero bench --device cuda --model gpt2 --seq 1024 --dtype bf16 --steps 30 (tok/s, MFU, pool reserved/used, launches/step)"

# 5. TODO: the PyTorch reference, scripts/gpu/torch_ref.py under torchrun
# with FSDP2 fully_shard, bf16 mixed precision, fused AdamW, SDPA.
todo torch-fsdp2 "torchrun --nproc_per_node=1 scripts/gpu/torch_ref.py (FSDP2 fully_shard, MixedPrecisionPolicy bf16/fp32, fused AdamW, SDPA) writing the same JSON"

# Summary.
{
	echo "dszero GPU run — $(cat "$OUT/REVISION" 2>/dev/null | head -1)"
	head -2 "$OUT/facts.log" 2>/dev/null | tail -1
	grep -m1 -E '^ *gpu_test.go:[0-9]+: cuda:' "$OUT/gpu-tests.log" 2>/dev/null | sed 's/^ *gpu_test.go:[0-9]*: //'
	grep -m1 -E 'no GPU:|does not open' "$OUT/gpu-tests.log" 2>/dev/null | sed 's/^ *gpu_test.go:[0-9]*: /GPU tests skipped or failed: /'
	echo
	printf '%-14s %-9s %7s  %s\n' STEP STATUS SECONDS NOTES
	while IFS=$'\t' read -r name status secs; do
		notes=""
		case $name in
		gpu-tests)
			pass=$(grep -c -- '^--- PASS' "$OUT/$name.log")
			fail=$(grep -c -- '^--- FAIL' "$OUT/$name.log")
			skip=$(grep -c -- '^--- SKIP' "$OUT/$name.log")
			sub=$(grep -c -- '^    --- FAIL' "$OUT/$name.log")
			notes="tests: $pass passed, $fail failed ($sub cases), $skip skipped"
			;;
		kernel-cache) notes=$(grep -o 'cache hit [a-z]*' "$OUT/$name.log" | head -1) ;;
		nccl-world1)
			notes="tests: $(grep -c -- '^--- PASS' "$OUT/$name.log") passed, $(grep -c -- '^--- FAIL' "$OUT/$name.log") failed, $(grep -c -- '^--- SKIP' "$OUT/$name.log") skipped"
			skip=$(grep -m1 -o -E 'no (NCCL|GPU): .*' "$OUT/$name.log" | cut -c1-60)
			[ -n "$skip" ] && notes="$notes ($skip)"
			;;
		dcp-interop) notes=$(grep -E '^(torch|read|wrote|fsdp2)' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-100) ;;
		*) [ "$status" = TODO ] && notes=$(cut -c7-80 "$OUT/$name.log") ;;
		esac
		printf '%-14s %-9s %7s  %s\n' "$name" "$status" "$secs" "$notes"
	done < "$OUT/steps.tsv"
	echo
	exact=$(grep 'GPUCMP' "$OUT/gpu-tests.log" 2>/dev/null | grep -c ': 0 of ')
	total=$(grep -c 'GPUCMP' "$OUT/gpu-tests.log" 2>/dev/null)
	echo "kernel outputs equal to the Go reference bit for bit: $exact of $total"
	grep 'GPUCMP' "$OUT/gpu-tests.log" 2>/dev/null | grep -v ': 0 of ' | sed 's/^ *gpu_test.go:[0-9]*: GPUCMP /  differs: /' | head -12
	grep -E '^\s+(gpu|conformance|harness)_test.go:[0-9]+: ' "$OUT/gpu-tests.log" 2>/dev/null | grep -v -E 'GPUCMP|no GPU' | grep -iE 'want|error|fail' | head -8 | sed 's/^/  /'
	grep -h -E 'compil|sm_[0-9]+, NVRTC' "$OUT/gpu-tests.log" 2>/dev/null | head -2 | sed 's/^ *gpu_test.go:[0-9]*: /  /'
} > "$SUMMARY"
cat "$SUMMARY"
