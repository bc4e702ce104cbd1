#!/usr/bin/python3
"""Golden data of DeepSpeed's compressed all-reduce from a real 1-bit Adam run, for comm's tests.

  ONEBIT_DUMP=DUMP /usr/bin/python3 conformance/reference/gen_case.py --ds-config onebit_adam.json \\
      --model gpt --init ROOT/init --world-size W --steps S --save-at 0 --out ROOT/gpt/run
  /usr/bin/python3 conformance/reference/gen_onebit_golden.py --dump DUMP --world-size W \\
      --params 3,5,6 --calls 3 --command "..." --out comm/inproc/testdata/deepspeed_compressed_gpt_wW.json

DUMP holds what onebit_backend.py writes with ONEBIT_DUMP set: per rank and call the padded input,
the worker and server errors after the call and the result (DeepSpeed's NcclBackend
compressed_allreduce op for op; only the sign transport is the port's, see onebit_backend.py).
OnebitAdam calls it once per parameter per step in the model's parameter order, the first round
being its initialization pass on zero momentum; this keeps, for each parameter index of --params,
the first --calls compressed steps after that pass (their errors start at zero and carry over).
Arrays are little-endian float32, base64.
"""
import argparse
import base64
import json
import os

import numpy as np


def b64(a):
    return base64.b64encode(np.asarray(a, dtype="<f4").tobytes()).decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--num-params", type=int, default=29, help="parameters per optimizer step (the GPT's 29)")
    ap.add_argument("--params", required=True, help="parameter indices, comma-separated")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--names", default="", help="models.json, for the parameters' names")
    ap.add_argument("--command", default="", help="the gen_case.py command of the dump, recorded")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    names = {}
    if a.names:
        desc = json.load(open(a.names))["gpt"]["params"]
        names = {i: p["name"] for i, p in enumerate(desc)}
    load = lambda r, c, k: np.load(os.path.join(a.dump, f"r{r}_c{c}_{k}.npy"))
    tensors = []
    for p in map(int, a.params.split(",")):
        calls = []
        for step in range(1, a.calls + 1):
            c = step * a.num_params + p
            calls.append({k: [b64(load(r, c, f)) for r in range(a.world_size)]
                          for k, f in (("in", "in"), ("out", "out"), ("worker", "we"), ("server", "se"))})
        tensors.append({"param": p, "name": names.get(p, ""), "padded": int(load(0, a.num_params + p, "in").size),
                        "calls": calls})
    out = {"source": "DeepSpeed 0.14.5 OnebitAdam in its engine (gen_case.py), NcclBackend.compressed_allreduce "
                     "ported to gloo (onebit_backend.py), dumped with ONEBIT_DUMP",
           "command": a.command, "world_size": a.world_size, "tensors": tensors}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
