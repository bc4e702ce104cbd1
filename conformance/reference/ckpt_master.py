"""Writes the fp32 master weights a DeepSpeed checkpoint's model states hold, as torch reads them.

For a stage-0 fp16 checkpoint (mp_rank_00_model_states.pt) the master is the fp16 wrapper's:
FP16_UnfusedOptimizer's optimizer.fp32_groups[0] (one copy per parameter) or FP16_Optimizer's
optimizer.fp32_groups_flat[0] (one flat tensor, cut by the module's shapes). The output is a
safetensors file under the module's parameter names, the reference for `dszero export`
(checkpoint.Export) of that checkpoint.

  /usr/bin/python3 conformance/reference/ckpt_master.py CKPT/global_stepN/mp_rank_00_model_states.pt OUT.safetensors
"""
import sys

import torch

import models as M


def main(path, out):
    sd = torch.load(path, map_location="cpu")
    module, opt = sd["module"], sd["optimizer"]
    if "fp32_groups_flat" in opt:
        flat, off, master = opt["fp32_groups_flat"][0], 0, {}
        for name, p in module.items():
            master[name] = flat[off:off + p.numel()].reshape(p.shape).clone()
            off += p.numel()
        if off != flat.numel():
            raise SystemExit(f"{path}: fp32_groups_flat[0] has {flat.numel()} elements, the module {off}")
    elif "fp32_groups" in opt:
        copies = opt["fp32_groups"][0]
        if len(copies) != len(module):
            raise SystemExit(f"{path}: {len(copies)} fp32 copies for {len(module)} parameters")
        master = {name: c.clone() for name, c in zip(module, copies)}
    else:
        raise SystemExit(f"{path}: no fp16 wrapper state (optimizer has {sorted(opt)})")
    M.save_safetensors(out, master, {"source": path, "torch_version": torch.__version__})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
