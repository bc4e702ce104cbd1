"""A stand-in for torch >= 2.4's dcp.save and dcp.load on machines whose
torch predates torch.distributed.checkpoint (Debian's 1.13).

It is NOT torch's code: the Metadata dataclasses below are modelled, field
for field, on torch/distributed/checkpoint/metadata.py and filesystem.py
(torch 2.4-2.11) and registered under torch's module names, so that
CPython's own pickler writes (and unpickler reads) .metadata as torch's
would; the blobs are written by the installed torch's real torch.save into
one stream per rank, as FileSystemWriter does. What it proves is bounded by
that reading of the source; torch_dcp.py, run where torch >= 2.4 is
installed (the GPU machine's step in scripts/gpu/run.sh), checks the real
thing.

  python3 standin.py write DIR WORLD    a checkpoint of the fixture saved on WORLD ranks
  python3 standin.py read DIR...        read checkpoints (dszero's) and compare them with the fixture
"""
import dataclasses
import enum
import io
import os
import pathlib
import pickle
import sys
import types
import uuid
from dataclasses import dataclass, field

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def _module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


_md = _module("torch.distributed.checkpoint.metadata")
_fs = _module("torch.distributed.checkpoint.filesystem")


@dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


@dataclass
class TensorProperties:
    dtype: torch.dtype = torch.float32
    layout: torch.layout = torch.strided
    requires_grad: bool = False
    memory_format: torch.memory_format = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    def __setstate__(self, state):
        self.dtype, self.layout, self.requires_grad, enc, self.pin_memory = state
        assert enc == _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, enc
        self.memory_format = torch.contiguous_format


@dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class StorageMeta:
    checkpoint_id: object = None
    save_id: object = None
    load_id: object = None
    modules: list = field(default_factory=list)


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None
    storage_meta: object = None
    version: object = None


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: object = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


for _c in (ChunkStorageMetadata, _MEM_FORMAT_ENCODING, TensorProperties, TensorStorageMetadata,
           BytesStorageMetadata, StorageMeta, Metadata, MetadataIndex):
    _c.__module__ = _md.__name__
    setattr(_md, _c.__name__, _c)
_StorageInfo.__module__ = _fs.__name__
_fs._StorageInfo = _StorageInfo


def flatten(sd):
    """flatten_state_dict with torch >= 2.4's traverse_state_dict."""
    out, paths = {}, {}

    def terminal(v):
        if isinstance(v, dict):
            return False
        if not isinstance(v, list):
            return True
        return not any((isinstance(e, (dict, list)) and not terminal(e)) or isinstance(e, torch.Tensor) for e in v)

    def visit(path, v):
        if isinstance(v, dict):
            for k, e in v.items():
                visit(path + (str(k),), e)
        elif terminal(v):
            key = ".".join(map(str, path))
            assert key not in out, key
            out[key], paths[key] = v, path
        else:
            for i, e in enumerate(v):
                visit(path + (i,), e)

    for k, v in sd.items():
        visit((str(k),), v)
    return out, paths


def write(dirname, world):
    """dcp.save of the fixture as FSDP would shard it on world ranks."""
    os.makedirs(dirname, exist_ok=True)
    flat, paths = flatten(common.state_dict())
    plans = [[] for _ in range(world)]  # (fqn, kind, tensor/value, offsets)
    for fqn, v in flat.items():
        if not isinstance(v, torch.Tensor):
            plans[0].append((fqn, "bytes", v, None))
        elif v.dim() == 0:
            plans[0].append((fqn, "tensor", v, ()))
        else:
            for r in range(world):
                rc = common.row_chunk(list(v.shape), world, r)
                if rc:
                    lo, n = rc
                    plans[r].append((fqn, "tensor", v.narrow(0, lo, n).clone(), (lo,) + (0,) * (v.dim() - 1)))
    md, storage = {}, {}
    for r, items in enumerate(plans):
        name = f"__{r}_0.distcp"
        with open(os.path.join(dirname, name), "wb") as f:
            for fqn, kind, v, off in [i for i in items if i[1] == "bytes"] + [i for i in items if i[1] != "bytes"]:
                start = f.tell()
                if kind == "bytes":
                    b = io.BytesIO()
                    torch.save(v, b)
                    f.write(b.getbuffer())
                else:
                    torch.save(v, f)
                storage[(fqn, off)] = _StorageInfo(name, start, f.tell() - start)
        for fqn, kind, v, off in items:
            if kind == "bytes":
                md[fqn] = BytesStorageMetadata()
                continue
            full = flat[fqn]
            tmd = md.setdefault(fqn, TensorStorageMetadata(TensorProperties(dtype=full.dtype), full.shape, []))
            tmd.chunks.append(ChunkStorageMetadata(torch.Size(off), v.shape))
    sd = {}
    for fqn, kind, v, off in [i for items in plans for i in items]:
        if kind == "bytes":
            sd[MetadataIndex(fqn)] = storage[(fqn, off)]
        else:
            idx = [c.offsets for c in md[fqn].chunks].index(torch.Size(off))
            sd[MetadataIndex(fqn, off, idx)] = storage[(fqn, off)]
    meta = Metadata(md, planner_data=paths, storage_data=sd,
                    storage_meta=StorageMeta(checkpoint_id=pathlib.Path(dirname), save_id=str(uuid.uuid4())),
                    version="1.0.0")
    with open(os.path.join(dirname, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def read(dirname):
    """dcp.load's view of a checkpoint: every key of the fixture, each tensor
    assembled from its chunks (torch.load of each blob, narrowed), compared."""
    with open(os.path.join(dirname, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    want, paths = flatten(common.state_dict())
    assert set(meta.state_dict_metadata) == set(want), (sorted(meta.state_dict_metadata), sorted(want))
    assert meta.planner_data == paths, (meta.planner_data, paths)
    files = {}

    def blob(info):
        if info.relative_path not in files:
            with open(os.path.join(dirname, info.relative_path), "rb") as f:
                files[info.relative_path] = f.read()
        return io.BytesIO(files[info.relative_path][info.offset:info.offset + info.length])

    for fqn, w in want.items():
        m = meta.state_dict_metadata[fqn]
        if isinstance(m, BytesStorageMetadata):
            got = torch.load(blob(meta.storage_data[MetadataIndex(fqn)]))
        else:
            assert m.properties.dtype == w.dtype and m.size == w.shape, (fqn, m)
            got = torch.zeros(w.shape, dtype=w.dtype)
            for c in m.chunks:
                t = torch.load(blob(meta.storage_data[MetadataIndex(fqn, c.offsets)]), map_location="cpu")
                assert t.shape == c.sizes and t.dtype == w.dtype, (fqn, t.shape, c)
                dst = got
                for d, (o, n) in enumerate(zip(c.offsets, c.sizes)):
                    dst = dst.narrow(d, o, n)
                dst.copy_(t)
        if not common.same(got, w):
            raise SystemExit(f"{fqn}: {got!r}, want {w!r}")
    print(f"read {dirname}: {len(want)} keys equal to the fixture")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]))
    else:
        for d in sys.argv[2:]:
            read(d)
