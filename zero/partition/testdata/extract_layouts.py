#!/usr/bin/env python3
"""Extract the partition-layout facts of DeepSpeed 0.14.5 checkpoints into deepspeed_layouts.json.

Input: the reference runs recorded by the harness (a checkpoint.json per run that describes
every tensor of the saved ZeRO checkpoint, plus init/models.json). Output: a compact JSON
with, per distinct layout, the runs that produced it and, per rank, the sizes and
param_slice_mappings that DeepSpeed saved. Only shapes and integers are kept; no weights.

Usage: python3 extract_layouts.py /path/to/deepspeed-0.14.5-cpu > deepspeed_layouts.json
"""
import glob
import json
import os
import re
import sys


def items(node):
    return node["items"]


def numels(tensor_list):
    return [t["numel"] for t in items(tensor_list)]


def ints(int_list):
    v = int_list["value"] if "value" in int_list else None
    if v is not None:
        return [v]
    return [x["value"] for x in items(int_list)]


def stage_of(enum_node):
    # "<ZeroStageEnum.optimizer_states: 1>" -> 1
    return int(re.search(r":\s*(\d+)>", enum_node["value"]).group(1))


def rank_of(path):
    return int(re.search(r"zero_pp_rank_(\d+)_", path).group(1))


def extract(run_dir):
    ck = json.load(open(os.path.join(run_dir, "checkpoint.json")))
    tag = ck["described_tag"]
    ranks = {}
    param_shapes = None
    world = None
    for f in ck["files"]:
        path = f["path"]
        if not path.startswith(tag + "/") or "content" not in f:
            continue
        c = items(f["content"])
        if path.endswith("model_states.pt"):
            if param_shapes is None and c["param_shapes"]["type"] == "list":
                param_shapes = [[[n, s["value"]] for n, s in items(g).items()] for g in items(c["param_shapes"])]
            world = c["dp_world_size"]["value"]
            continue
        if not path.endswith("optim_states.pt"):
            continue
        o = items(c["optimizer_state_dict"])
        r = {}
        if "fp32_flat_groups" in o:  # stage 3
            r["fp32_flat_groups"] = numels(o["fp32_flat_groups"])
        else:  # stage 1/2 (DeepSpeedZeroOptimizer) or stage 0 bf16 (BF16_Optimizer)
            r["single_partition_of_fp32_groups"] = numels(o["single_partition_of_fp32_groups"])
            r["group_paddings"] = ints(o["group_paddings"])
            r["param_slice_mappings"] = [
                [[name, fa["fields"]["start"]["value"], fa["fields"]["numel"]["value"]] for name, fa in items(g).items()]
                for g in items(o["param_slice_mappings"])
            ]
        r["partition_count"] = ints(o["partition_count"])
        ranks[rank_of(path)] = r
    if not ranks:
        return None
    res = json.load(open(os.path.join(run_dir, "result.json")))
    return {
        "stage": res["engine"]["zero_stage"],
        "optimizer_wrapper": res["engine"]["optimizer_wrapper"],
        "world": world,
        "param_shapes": param_shapes,
        "ranks": [ranks[k] for k in sorted(ranks)],
        "master_numel": [res["memory"][k].get("master_numel") for k in sorted(res["memory"])],
    }


def main(root):
    models = json.load(open(os.path.join(root, "init", "models.json")))
    out = {
        "source": "DeepSpeed 0.14.5 (torch 1.13, gloo, CPU), 2 ranks; extracted by extract_layouts.py",
        "models": {m: [[p["name"], p["numel"]] for p in v["params"]] for m, v in models.items()},
        "layouts": [],
    }
    seen = {}
    for run_dir in sorted(glob.glob(os.path.join(root, "*", "*"))):
        if not os.path.exists(os.path.join(run_dir, "checkpoint.json")):
            continue
        lay = extract(run_dir)
        if lay is None:
            continue
        model = os.path.basename(os.path.dirname(run_dir))
        # param_shapes only restates models.json (checked here); keep just the group order.
        shapes = lay.pop("param_shapes")
        order = [[n for n, _ in g] for g in shapes] if shapes else None
        byname = {p["name"]: p["numel"] for p in models[model]["params"]}
        for g in shapes or []:
            for n, s in g:
                prod = 1
                for d in s:
                    prod *= d
                assert byname[n] == prod, (run_dir, n)
        lay["param_groups"] = order
        lay["model"] = model
        key = json.dumps(lay, sort_keys=True)
        run = os.path.basename(run_dir)
        if key in seen:
            seen[key]["runs"].append(run)
            continue
        lay["runs"] = [run]
        seen[key] = lay
        out["layouts"].append(lay)
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/deepspeed-0.14.5-cpu")
