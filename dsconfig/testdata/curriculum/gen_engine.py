"""Regenerate engine.json: what real DeepSpeed's engine hands the model's
forward under progressive_layer_drop and curriculum_learning, forward by
forward (pld_theta, curriculum_seqlen), with gradient accumulation.

    /usr/bin/python3 dsconfig/testdata/curriculum/gen_engine.py dsconfig/testdata/curriculum/engine.json

Runs DeepSpeed v0.14.5 from source on the CPU, one rank over gloo, in the
environment of conformance/reference (envsetup.py, compat.py; its
setup.sh exports the source to ~/.cache/dszero-ref/deepspeed-src).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "..", "..", "conformance", "reference")
sys.path.insert(0, REF)
import envsetup  # noqa: E402

envsetup.apply("")
os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"})

import torch  # noqa: E402
import compat  # noqa: E402,F401
import deepspeed  # noqa: E402


class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.calls = []

    def forward(self, x, **kwargs):
        self.calls.append({k: (float(v) if k == "pld_theta" else v) for k, v in kwargs.items() if k != "progressive_layer_drop"})
        return (self.w * x).sum()


def run(extra, steps, gas):
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": gas,
           "optimizer": {"type": "SGD", "params": {"lr": 0.0}}, **extra}
    m = Recorder()
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
    for _ in range(steps * gas):
        loss = engine(torch.ones(4))
        engine.backward(loss)
        engine.step()
    return {"ds_config": cfg, "steps": steps, "forwards": m.calls}


out = {"deepspeed": deepspeed.__version__, "runs": {
    "pld": run({"progressive_layer_drop": {"enabled": True, "theta": 0.5, "gamma": 0.1}}, 5, 2),
    "curriculum_linear": run({"curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 2,
                                                      "max_difficulty": 10, "schedule_type": "fixed_linear",
                                                      "schedule_config": {"total_curriculum_step": 4, "difficulty_step": 2}}}, 6, 2),
    "curriculum_discrete": run({"curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 3,
                                                        "max_difficulty": 9, "schedule_type": "fixed_discrete",
                                                        "schedule_config": {"difficulty": [3, 5, 9], "max_step": [1, 3]}}}, 5, 1),
}}
with open(sys.argv[1], "w") as f:  # DeepSpeed logs on stdout
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
