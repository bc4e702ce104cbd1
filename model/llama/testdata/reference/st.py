"""safetensors files without the safetensors package: a writer (F32, BF16,
F16, I64), a reader, and the Hugging Face checkpoint directory layout
(model.safetensors, or model-0000K-of-0000N.safetensors shards with
model.safetensors.index.json split the way huggingface_hub's
split_torch_state_dict_into_shards splits)."""
import json
import os
import struct

import torch

DTYPES = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2), torch.float16: ("F16", 2), torch.int64: ("I64", 8)}
BY_NAME = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}


def _raw(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    """tensors: dict name -> tensor, written in insertion order."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        dt, size = DTYPES[t.dtype]
        b = _raw(t)
        assert len(b) == t.numel() * size
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = BY_NAME[e["dtype"]]
        raw = bytearray(data[a:b])
        if dt in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(raw, dtype=torch.int16).view(dt)
        else:
            t = torch.frombuffer(raw, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out, meta


def save_checkpoint(dir, state, max_shard_bytes=None):
    """Writes state (name -> tensor, in order) as an HF checkpoint directory:
    one model.safetensors, or shards and an index when the tensors exceed
    max_shard_bytes."""
    os.makedirs(dir, exist_ok=True)
    shards, cur, cur_size = [], {}, 0
    for name, t in state.items():
        size = t.numel() * DTYPES[t.dtype][1]
        if max_shard_bytes is not None and size > max_shard_bytes:
            shards.append({name: t})
            continue
        if max_shard_bytes is not None and cur_size + size > max_shard_bytes:
            shards.append(cur)
            cur, cur_size = {}, 0
        cur[name] = t
        cur_size += size
    if cur:
        shards.append(cur)
    meta = {"format": "pt"}
    if len(shards) == 1:
        save(os.path.join(dir, "model.safetensors"), shards[0], meta)
        return
    weight_map, total = {}, 0
    for i, sh in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save(os.path.join(dir, fname), sh, meta)
        for name, t in sh.items():
            weight_map[name] = fname
            total += t.numel() * DTYPES[t.dtype][1]
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(dir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def load_checkpoint(dir):
    idx = os.path.join(dir, "model.safetensors.index.json")
    if not os.path.exists(idx):
        return load(os.path.join(dir, "model.safetensors"))[0]
    with open(idx) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for fname in sorted(set(weight_map.values())):
        out.update(load(os.path.join(dir, fname))[0])
    return out
