#!/usr/bin/env bash
# Regenerates tensorboard_event.binpb and ../../tfevents/testdata/golden.tfevents.
#
# tensorboard_event.binpb: the FileDescriptorSet of TensorBoard's event.proto
# and its imports, compiled by protoc 3.21.12 (Debian protobuf-compiler) from
# github.com/tensorflow/tensorboard at commit
# 70b76c922822dcccc3e8d7e5dd89860948690357 (event.proto and summary.proto last
# changed in df448ad1200768e0ed9241038a6c9a969bc37109).
#
# Usage: regen.sh PATH_TO_TENSORBOARD_CHECKOUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tb="$1"
cd "$tb"
protoc --include_imports --descriptor_set_out="$here/tensorboard_event.binpb" tensorboard/compat/proto/event.proto
cd "$here"
/usr/bin/python3 gen_golden.py
