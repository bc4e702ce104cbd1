#!/usr/bin/env bash
# Prepares this machine for gen_case.py (Debian 12, root). Idempotent.
#   DS_GIT=/path/to/DeepSpeed.git ./setup.sh
# 1. installs the Debian packages (CPU torch 1.13.1 and what DeepSpeed 0.14.5 imports or JIT-builds with);
# 2. selects OpenBLAS (pthread) as libblas.so.3: the shipped references were computed with it, and
#    Debian's reference BLAS shifts every number at the 1e-7 level;
# 3. exports DeepSpeed v0.14.5 (commit eb07d41f) from a git clone into $DS_SRC and writes the
#    version file that `pip install` would generate (no pre-built ops).
set -euo pipefail
DS_TAG=v0.14.5
DS_COMMIT=eb07d41f959bda6c76b106c1c1c40493720b2fb8
DS_SRC=${DS_SRC:-$HOME/.cache/dszero-ref/deepspeed-src}

PKGS="python3-torch libtorch-dev python3-numpy python3-pydantic python3-psutil python3-tqdm python3-packaging
      python3-cpuinfo python3-dev pybind11-dev g++ ninja-build numactl libaio-dev libopenblas0-pthread"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi
update-alternatives --set libblas.so.3-x86_64-linux-gnu \
  /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null 2>&1 || true

if [ ! -f "$DS_SRC/deepspeed/__init__.py" ]; then
  DS_GIT=${DS_GIT:?set DS_GIT to a git clone (bare is fine) of github.com/deepspeedai/DeepSpeed}
  got=$(git --git-dir="$DS_GIT" rev-parse "$DS_TAG^{commit}")
  [ "$got" = "$DS_COMMIT" ] || { echo "$DS_TAG is $got in $DS_GIT, want $DS_COMMIT" >&2; exit 1; }
  mkdir -p "$DS_SRC"
  # Only the package, the op builders and their C++ sources: the repository's blogs/ and docs/
  # hold large media that partial mirrors lack (git may print "invalid object" for them).
  git --git-dir="$DS_GIT" archive "$DS_COMMIT" deepspeed accelerator op_builder csrc version.txt \
      requirements setup.py LICENSE | tar -x -C "$DS_SRC"
fi

# What setup.py writes at install time: the version, and that no op is pre-built (DS_BUILD_OPS=0).
cat > "$DS_SRC/deepspeed/git_version_info_installed.py" <<PY
version='${DS_TAG#v}+${DS_COMMIT:0:8}'
git_hash='${DS_COMMIT:0:8}'
git_branch='${DS_TAG}'
installed_ops={'async_io': False, 'fused_adagrad': False, 'cpu_adam': False, 'fused_adam': False, 'fused_lamb': False, 'fused_lion': False, 'cpu_lion': False, 'cpu_adagrad': False, 'evoformer_attn': False, 'fp_quantizer': False, 'inference_core_ops': False, 'cutlass_ops': False, 'transformer_inference': False, 'quantizer': False, 'ragged_device_ops': False, 'ragged_ops': False, 'random_ltd': False, 'sparse_attn': False, 'spatial_inference': False, 'transformer': False, 'stochastic_transformer': False}
accelerator_name='cpu'
torch_info={'version': '1.13', 'bf16_support': False, 'cuda_version': '0.0', 'nccl_version': '0.0', 'hip_version': '0.0'}
PY
echo "DeepSpeed $DS_TAG ready in $DS_SRC"
