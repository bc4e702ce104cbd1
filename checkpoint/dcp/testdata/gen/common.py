"""The interop fixture, built as fixture_test.go builds it: testdata/spec.json
names the tensors and values; element i of a float tensor of seed s is
value(s, i), of an integer tensor s*1000 + i. Shared by standin.py and
torch_dcp.py."""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "spec.json")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64}


def value(s, i):
    return float(((s * 37 + i * 11) % 64) - 32) * 0.25


def spec():
    with open(SPEC) as f:
        return json.load(f)


def tensor(e):
    n = 1
    for d in e["shape"]:
        n *= d
    dt = DTYPES[e["dtype"]]
    if dt == torch.int64:
        flat = torch.tensor([e["seed"] * 1000 + i for i in range(n)], dtype=torch.int64)
    else:
        flat = torch.tensor([value(e["seed"], i) for i in range(n)], dtype=torch.float32).to(dt)
    return flat.reshape(e["shape"])


def set_path(root, path, v):
    cur = root
    for i, p in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(cur, list):
            cur = cur[p]
            continue
        if p not in cur:
            cur[p] = [{}] if isinstance(nxt, int) else {}
        cur = cur[p]
    cur[path[-1]] = v


def state_dict():
    """The nested state dict, inserted in spec order (tensors, then values)."""
    s = spec()
    root = {}
    for e in s["tensors"]:
        set_path(root, e["path"], tensor(e))
    for e in s["values"]:
        v = tuple(e["tuple"]) if "tuple" in e else e["value"]
        set_path(root, e["path"], v)
    return root


def leaves():
    """(dotted key, value) for every leaf of the fixture."""
    s = spec()
    out = {}
    for e in s["tensors"]:
        out[".".join(map(str, e["path"]))] = tensor(e)
    for e in s["values"]:
        out[".".join(map(str, e["path"]))] = tuple(e["tuple"]) if "tuple" in e else e["value"]
    return out


def row_chunk(size, world, rank):
    """FSDP's dim-0 chunk (torch.chunk): (lo, n) or None."""
    if len(size) == 0:
        return None
    c = -(-size[0] // world)
    lo = min(rank * c, size[0])
    hi = min(lo + c, size[0])
    return (lo, hi - lo) if hi > lo else None


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
            and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
