"""checkpoint.json: the structure of every file of a DeepSpeed checkpoint directory.

For one tag (the final one) plus the root files (latest, zero_to_fp32.py): each file's path,
size, and for .pt files the unpickled object as a tree of typed nodes, in the JSON shape of the
shipped references (shared/reference/deepspeed-0.14.5-cpu/*/*/checkpoint.json):

  tensor      {"type": "tensor", "dtype", "shape", "numel", "device"[, "value" if one element]}
  dict        {"type": <class name>, "len", "key_types", "items": {str(key): node}}
  list/tuple  {"type", "len", "items": [...]}, or past 12 items "first_items" (3), "last_item", "item_types"
  scalars     {"type": "int"|"float"|"bool"|"NoneType"|"str", "value"} (str cut at 300 characters)
  others      torch.Size, enums (repr), dataclasses ("fields"), objects ("attrs"), else {"type", "repr"}

Unpickling needs deepspeed importable (ZeroStageEnum, LossScaler, fragment_address).

usage: checkpoint_json.py CKPT_DIR OUT.json [TAG]
"""
import dataclasses
import enum
import json
import os
import sys

import torch

LIST_MAX = 12
DEPTH_MAX = 12


def node(o, depth=0):
    if depth > DEPTH_MAX:
        return {"type": type(o).__name__, "truncated": True}
    if torch.is_tensor(o):
        d = {"type": "tensor", "dtype": str(o.dtype).replace("torch.", ""), "shape": list(o.shape),
             "numel": o.numel(), "device": str(o.device)}
        if o.numel() == 1:
            d["value"] = o.item()
        return d
    if isinstance(o, torch.Size):
        return {"type": "torch.Size", "value": list(o)}
    if o is None or isinstance(o, bool):
        return {"type": type(o).__name__, "value": o}
    if isinstance(o, enum.Enum):          # before int: ZeroStageEnum is an int enum
        return {"type": f"enum {type(o).__module__}.{type(o).__name__}", "value": repr(o)}
    if isinstance(o, (int, float)):
        return {"type": type(o).__name__, "value": o}
    if isinstance(o, str):
        return {"type": "str", "value": o if len(o) <= 300 else o[:300] + "..."}
    if isinstance(o, dict):
        return {"type": type(o).__name__, "len": len(o), "key_types": sorted({type(k).__name__ for k in o}),
                "items": {str(k): node(v, depth + 1) for k, v in o.items()}}
    if isinstance(o, (list, tuple)):
        d = {"type": type(o).__name__, "len": len(o)}
        if len(o) <= LIST_MAX:
            d["items"] = [node(x, depth + 1) for x in o]
        else:
            d.update(first_items=[node(x, depth + 1) for x in o[:3]], last_item=node(o[-1], depth + 1),
                     item_types=sorted({type(x).__name__ for x in o}))
        return d
    if dataclasses.is_dataclass(o):
        return {"type": f"dataclass {type(o).__module__}.{type(o).__name__}",
                "fields": {f.name: node(getattr(o, f.name), depth + 1) for f in dataclasses.fields(o)}}
    if hasattr(o, "__dict__") and not callable(o):
        return {"type": f"object {type(o).__module__}.{type(o).__name__}",
                "attrs": {k: node(v, depth + 1) for k, v in vars(o).items() if not k.startswith("__")}}
    return {"type": f"{type(o).__module__}.{type(o).__name__}", "repr": repr(o)[:300]}


def describe(ckpt_dir, tag=None):
    """The description of ckpt_dir; with tag, only that tag's files (and the root files)."""
    files = []
    for root, dirs, names in os.walk(ckpt_dir):
        dirs.sort()
        for fn in sorted(names):
            path = os.path.join(root, fn)
            rel = os.path.relpath(path, ckpt_dir)
            top = rel.split(os.sep)[0]
            if tag and top.startswith("global_step") and top != tag:
                continue
            ent = {"path": rel, "bytes": os.path.getsize(path)}
            if fn.endswith(".pt"):
                try:
                    ent["content"] = node(torch.load(path, map_location="cpu"))
                except Exception as e:  # noqa: BLE001
                    ent["load_error"] = f"{type(e).__name__}: {e}"
            elif fn == "latest":
                with open(path) as f:
                    ent["text"] = f.read()
            elif fn.endswith(".py"):
                ent["note"] = "DeepSpeed copies deepspeed/utils/zero_to_fp32.py into every checkpoint root"
            files.append(ent)
    tags = sorted(d for d in os.listdir(ckpt_dir) if os.path.isdir(os.path.join(ckpt_dir, d)))
    return {"checkpoint_dir": "<ckpt>", "tags_present": tags, "described_tag": tag or "all", "files": files}


def write(ckpt_dir, out_path, tag=None):
    """Writes the description compactly (as the references do; `jq .` reads it); returns it."""
    d = describe(ckpt_dir, tag)
    with open(out_path, "w") as f:
        json.dump(d, f, separators=(",", ":"), default=str)
    return d


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
