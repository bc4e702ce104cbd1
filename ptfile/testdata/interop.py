"""PyTorch side of ptfile's interop tests (run by interop_test.go).

usage:
  interop.py describe OUT.json FILE...   torch.load each FILE, write [description, ...]
  interop.py make DIR                    torch.save the fixture as DIR/torch_p2.pt (protocol 2,
                                         torch's default) and DIR/torch_p4.pt (protocol 4)

A description is the same canonical JSON that describe() in describe_test.go
computes from what ptfile reads, so the two can be compared as strings.
DeepSpeed is not needed: the three DeepSpeed classes its checkpoints pickle
are defined here as stand-ins under their real module names.
"""
import copyreg
import dataclasses
import enum
import json
import struct
import sys
import types

import torch


def install_deepspeed_stubs():
    def module(name):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        return sys.modules[name]

    m = module("deepspeed.runtime.fp16.loss_scaler")

    class LossScaler:
        def __init__(self, scale=1.0):
            self.cur_scale = scale
            self.dynamic = False

    class DynamicLossScaler(LossScaler):
        pass

    for c in (LossScaler, DynamicLossScaler):
        c.__module__, c.__qualname__ = m.__name__, c.__name__
        setattr(m, c.__name__, c)

    m = module("deepspeed.runtime.zero.config")

    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3
        max_stage = 3

    ZeroStageEnum.__module__, ZeroStageEnum.__qualname__ = m.__name__, "ZeroStageEnum"
    m.ZeroStageEnum = ZeroStageEnum

    m = module("deepspeed.utils.tensor_fragment")

    @dataclasses.dataclass
    class fragment_address:
        numel: int
        start: int

    fragment_address.__module__, fragment_address.__qualname__ = m.__name__, "fragment_address"
    m.fragment_address = fragment_address


SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Describer:
    def __init__(self):
        self.labels = {}
        self.n = 0

    def items(self, xs):
        return [self.value(x) for x in xs]

    def value(self, o):
        if o is None:
            return {"t": "none"}
        if isinstance(o, bool):
            return {"t": "bool", "v": o}
        if isinstance(o, int) and not isinstance(o, enum.Enum):
            return {"t": "int", "v": str(o)}
        if isinstance(o, float):
            return {"t": "float", "v": struct.pack(">d", o).hex()}
        if isinstance(o, str):
            return {"t": "str", "v": o}
        if isinstance(o, bytes):
            return {"t": "bytes", "v": o.hex()}
        if isinstance(o, torch.dtype):
            return {"t": "dtype", "v": str(o)[len("torch."):]}
        if isinstance(o, torch.Size):
            return {"t": "size", "v": list(o)}
        if isinstance(o, list):
            return {"t": "list", "items": self.items(o)}
        if isinstance(o, tuple):
            return {"t": "tuple", "items": self.items(o)}
        if isinstance(o, set):
            items = self.items(o)
            items.sort(key=lambda d: json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
            return {"t": "set", "items": items}
        if torch.is_tensor(o):
            return self.tensor(o)
        if type(o) is dict or type(o).__name__ == "OrderedDict":
            d = {"t": "dict" if type(o) is dict else "OrderedDict",
                 "items": [[self.value(k), self.value(v)] for k, v in o.items()]}
            if getattr(o, "__dict__", None):
                d["attrs"] = self.value(dict(vars(o)))
            return d
        return self.object(o)

    def tensor(self, t):
        st = t.storage()
        key = (st.data_ptr(), st.size())
        if key not in self.labels or st.size() == 0:  # an empty storage is never shared
            self.labels[key] = "s%d" % self.n
            self.n += 1
        x = t.detach().clone().contiguous()
        if x.dtype == torch.bool:
            x = x.to(torch.uint8)
        elif x.dtype not in (torch.uint8, torch.int8):
            x = x.view(SAME_SIZE_INT[x.element_size()])
        return {"t": "tensor", "dtype": str(t.dtype)[len("torch."):], "shape": list(t.shape),
                "stride": list(t.stride()), "offset": t.storage_offset(), "requires_grad": t.requires_grad,
                "param": isinstance(t, torch.nn.Parameter), "storage": self.labels[key],
                "storage_numel": st.size(), "data": x.numpy().tobytes().hex()}

    def object(self, o):
        if isinstance(o, type):
            return {"t": "object", "class": o.__module__ + "." + o.__qualname__, "kind": "class"}
        r = o.__reduce_ex__(2)
        fn, args = r[0], r[1]
        state = r[2] if len(r) > 2 else None
        if fn is getattr:
            d = {"t": "object", "class": args[0].__module__ + "." + args[0].__qualname__, "kind": "enum",
                 "attr": args[1]}
        elif fn is copyreg.__newobj__:
            d = {"t": "object", "class": args[0].__module__ + "." + args[0].__qualname__, "kind": "new",
                 "args": self.items(args[1:])}
        else:
            d = {"t": "object", "class": fn.__module__ + "." + fn.__qualname__, "kind": "call",
                 "args": self.items(args)}
        if state is not None:
            d["state"] = self.value(state)
        return d


def describe(path):
    return Describer().value(torch.load(path))


def fixture():
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    flat = torch.arange(20, dtype=torch.bfloat16)
    grid = torch.arange(12.0).view(3, 4)
    return {
        "state_dict": model.state_dict(),
        "views": {"a": flat[0:6].view(2, 3), "b": flat[6:], "at": flat[0:6].view(2, 3).t(), "cols": grid[:, 1:3],
                  "grid": grid},
        "dtypes": {"f32": torch.tensor([1.0, -2.5, float("inf")]), "f64": torch.tensor([1e300, -0.0], dtype=torch.float64),
                   "f16": torch.tensor([65504.0, 6e-8, -1.0], dtype=torch.float16),
                   "bf16": torch.tensor([1.0, 3e38, -7.0], dtype=torch.bfloat16),
                   "i64": torch.tensor([-(2 ** 63), 2 ** 63 - 1]), "i32": torch.tensor([-5, 7], dtype=torch.int32),
                   "i16": torch.tensor([-300], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
                   "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False, True])},
        "scalar": torch.tensor(10.0),
        "empty": torch.zeros(0),
        "param": torch.nn.Parameter(torch.ones(2)),
        "requires_grad": torch.ones(2, requires_grad=True),
        "plain": [1, -1, 255, 256, 65535, 65536, 2 ** 31, -(2 ** 31) - 1, 2 ** 70, -(2 ** 70), 1.5, float("inf"), -0.0,
                  "h\u00e9llo \u2713", None, True, False, (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], {},
                  {1: "a", "b": 2, None: 0.5}],
        "size": torch.Size([2, 3]),
        "set": {3, 1, 2},
        "empty_set": set(),
        "dtype": torch.float16,
        "bytes": b"\x00\xffabc",
        "empty_bytes": b"",
        "device": torch.device("cpu"),
        "deepspeed": {"loss_scaler": LossScaler(), "zero_stage": ZeroStageEnum.gradients,
                      "fragment": fragment_address(numel=4, start=2)},
        "big": {i: float(i) for i in range(1100)},
    }


def main():
    install_deepspeed_stubs()
    if sys.argv[1] == "describe":
        with open(sys.argv[2], "w") as f:
            json.dump([describe(p) for p in sys.argv[3:]], f, sort_keys=True)
    elif sys.argv[1] == "make":
        obj = fixture()
        torch.save(obj, sys.argv[2] + "/torch_p2.pt")
        torch.save(obj, sys.argv[2] + "/torch_p4.pt", pickle_protocol=4)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
