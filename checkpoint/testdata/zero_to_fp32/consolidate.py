"""PyTorch side of checkpoint's TestZeroToFP32ReadsDszero (run by zero_to_fp32_test.go).

usage:
  consolidate.py CHECKPOINT_DIR OUT_DIR

1. torch.load()s every .pt file under CHECKPOINT_DIR (the root holding `latest`) and writes
   OUT_DIR/loaded.json: {relative path: sorted top-level keys}.
2. Runs DeepSpeed v0.14.5's own get_fp32_state_dict_from_zero_checkpoint(CHECKPOINT_DIR) from
   zero_to_fp32.py (next to this file, unchanged) and writes OUT_DIR/fp32.json, an index
   {"tensors": [{"name", "dtype", "shape", "offset", "numel"}, ...]} in the state dict's order,
   and OUT_DIR/fp32.bin, each tensor's elements as little-endian float32 at its offset (in
   elements). If zero_to_fp32 raises, fp32.json is {"error": "Type: message"} instead.
3. OUT_DIR/module.json + module.bin: the same for the "module" state dict of the tag's first
   model-states file (mp_rank_00_model_states.pt, or zero_pp_rank_0_mp_rank_00_model_states.pt),
   converted to float32, so stage 0 (which zero_to_fp32 refuses, for DeepSpeed's checkpoints too)
   is checked as well.

DeepSpeed is not needed. The classes DeepSpeed pickles come from ptfile/testdata/interop.py's
install_deepspeed_stubs(); the two DeepSpeed modules zero_to_fp32.py imports (deepspeed.utils for
`logger`, deepspeed.checkpoint.constants for ten key names) are stand-ins defined here, with the
values of deepspeed/checkpoint/constants.py at v0.14.5.
"""
import importlib.util
import json
import logging
import os
import sys
import types

import torch

sys.dont_write_bytecode = True   # no __pycache__ in ptfile/testdata or here
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "ptfile", "testdata"))

import interop  # noqa: E402  (ptfile/testdata/interop.py)

# deepspeed/checkpoint/constants.py at v0.14.5 (eb07d41f), the names zero_to_fp32.py imports
CONSTANTS = {
    "DS_VERSION": "ds_version",
    "OPTIMIZER_STATE_DICT": "optimizer_state_dict",
    "SINGLE_PARTITION_OF_FP32_GROUPS": "single_partition_of_fp32_groups",
    "FP32_FLAT_GROUPS": "fp32_flat_groups",
    "ZERO_STAGE": "zero_stage",
    "PARTITION_COUNT": "partition_count",
    "PARAM_SHAPES": "param_shapes",
    "BUFFER_NAMES": "buffer_names",
    "FROZEN_PARAM_SHAPES": "frozen_param_shapes",
    "FROZEN_PARAM_FRAGMENTS": "frozen_param_fragments",
}


def install_stubs():
    interop.install_deepspeed_stubs()   # creates deepspeed, deepspeed.utils, ... as plain modules

    def module(name):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[".".join(parts[:i])])
        return sys.modules[name]

    module("deepspeed.utils").logger = logging.getLogger("deepspeed")
    consts = module("deepspeed.checkpoint.constants")
    for k, v in CONSTANTS.items():
        setattr(consts, k, v)


def load_zero_to_fp32():
    spec = importlib.util.spec_from_file_location("zero_to_fp32", os.path.join(HERE, "zero_to_fp32.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_tensors(state_dict, out_json, out_bin):
    index, offset = [], 0
    with open(out_bin, "wb") as f:
        for name, t in state_dict.items():
            x = t.detach().to(torch.float32).contiguous().reshape(-1)
            index.append({"name": name, "dtype": str(t.dtype)[len("torch."):], "shape": list(t.shape),
                          "offset": offset, "numel": x.numel()})
            f.write(x.numpy().astype("<f4").tobytes())
            offset += x.numel()
    with open(out_json, "w") as f:
        json.dump({"tensors": index}, f)


def main():
    ckpt, out = sys.argv[1], sys.argv[2]
    install_stubs()

    loaded = {}
    for root, _, files in os.walk(ckpt):
        for fn in sorted(files):
            if fn.endswith(".pt"):
                p = os.path.join(root, fn)
                sd = torch.load(p, map_location="cpu")
                loaded[os.path.relpath(p, ckpt)] = sorted(str(k) for k in sd)
    with open(os.path.join(out, "loaded.json"), "w") as f:
        json.dump(loaded, f)

    with open(os.path.join(ckpt, "latest")) as f:
        tag = f.read().strip()
    for fn in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        p = os.path.join(ckpt, tag, fn)
        if os.path.exists(p):
            write_tensors(torch.load(p, map_location="cpu")["module"], os.path.join(out, "module.json"),
                          os.path.join(out, "module.bin"))
            break

    z2f = load_zero_to_fp32()
    try:
        sd = z2f.get_fp32_state_dict_from_zero_checkpoint(ckpt)
    except Exception as e:  # the Go test decides whether this refusal is DeepSpeed's own
        with open(os.path.join(out, "fp32.json"), "w") as f:
            json.dump({"error": f"{type(e).__name__}: {e}"}, f)
        return
    write_tensors(sd, os.path.join(out, "fp32.json"), os.path.join(out, "fp32.bin"))


if __name__ == "__main__":
    main()
