#!/usr/bin/env bash
# build.sh — run on the development machine. Builds what scripts/gpu/run.sh
# runs on the GPU machine, which has no Go toolchain: CGO_ENABLED=0
# binaries (purego binds CUDA at run time, so nothing CUDA is needed to
# build) into the git-ignored folder .gpu/, small enough to carry (< 64 MiB).
#
#   scripts/gpu/build.sh        # then, on the GPU machine: scripts/gpu/run.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rm -rf .gpu
mkdir -p .gpu
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
go build -trimpath -o .gpu/dszero ./cmd/dszero
go test -c -trimpath -o .gpu/cuda.test ./cuda
go test -c -trimpath -o .gpu/nccl.test ./comm/nccl
git rev-parse HEAD > .gpu/REVISION
git status --porcelain --untracked-files=no | grep -q . && echo "dirty" >> .gpu/REVISION || true
size=$(du -sm .gpu | cut -f1)
echo "built .gpu ($size MiB): $(ls .gpu | tr '\n' ' ')"
if [ "$size" -ge 64 ]; then
	echo "error: .gpu is $size MiB; the GPU machine takes at most 64 MiB" >&2
	exit 1
fi
