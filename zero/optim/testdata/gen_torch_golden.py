#!/usr/bin/python3
"""Writes torch_golden.json: what PyTorch 1.13.1 (CPU) computes for the optimizers and the
gradient-norm / clipping functions that zero/optim reproduces bit for bit.

Regenerate (Debian 12, the same torch the DeepSpeed reference harness used):
    apt-get install python3-torch          # 1.13.1+dfsg-4, "CPU capability usage: AVX2"
    cd zero/optim/testdata && OMP_NUM_THREADS=1 /usr/bin/python3 gen_torch_golden.py | gzip -9n > torch_golden.json.gz

Inputs come from numpy.random.RandomState(seed), so the file is reproducible. Float32 values are
written as Python floats (exact: every float32 is a double, and repr round-trips).
"""
import json
import math
import sys

import numpy as np
import torch

torch.set_num_threads(1)
SIZES = [37, 64, 203, 5]  # vector body + scalar tail (AVX2: 16 per unrolled step), pure tail
STEPS = 5
LRS = [1e-3, 1e-4, 4e-4, 7e-4, 1e-3, 8.714285714285714e-4]


def f32list(t):
    return [float(x) for x in t.detach().reshape(-1).to(torch.float32).numpy()]


def make_inputs(seed):
    rs = np.random.RandomState(seed)
    params, grads = [], []
    for n in SIZES:
        p = (rs.standard_normal(n) * 0.02 * 10.0 ** rs.uniform(-1, 1, n)).astype(np.float32)
        params.append(p)
        gs = []
        for _ in range(STEPS):
            g = (rs.standard_normal(n) * 10.0 ** rs.uniform(-6, 0, n)).astype(np.float32)
            gs.append(g)
        grads.append(gs)
    return params, grads


def run(opt_factory, seed, betas_per_step=None):
    params, grads = make_inputs(seed)
    ps = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    opt = opt_factory(ps)
    out = {"seed": seed, "sizes": SIZES, "lrs": LRS, "init": [p.tolist() for p in params],
           "grads": [[g.tolist() for g in gs] for gs in grads], "steps": []}
    if betas_per_step is not None:
        out["betas"] = betas_per_step
    for s in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = LRS[s]
            if betas_per_step is not None:
                g["betas"] = tuple(betas_per_step[s])
        for i, p in enumerate(ps):
            p.grad = torch.from_numpy(grads[i][s].copy())
        opt.step()
        rec = {"params": [f32list(p) for p in ps], "state": []}
        for p in ps:
            st = {}
            for k, v in opt.state[p].items():
                if torch.is_tensor(v):
                    st[k] = float(v) if v.dim() == 0 else f32list(v)
                else:
                    st[k] = v
            rec["state"].append(st)
        out["steps"].append(rec)
    return out


def norms_case(seed):
    rs = np.random.RandomState(seed)
    sizes = [1, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 37, 64, 100, 1000, 4097]
    xs = [(rs.standard_normal(n) * 10.0 ** rs.uniform(-4, 1, n)).astype(np.float32) for n in sizes]
    ts = [torch.from_numpy(x.copy()) for x in xs]
    norm_f32 = [float(torch.norm(t, 2.0)) for t in ts]
    norm_f64 = [float(torch.norm(t.double(), 2.0)) for t in ts]
    stacked = torch.stack([torch.norm(t, 2.0) for t in ts])
    # DeepSpeed stage 0 (runtime/utils.py clip_grad_norm_): stack -> square -> sum -> float -> pow(1/2)
    ds0_sq = stacked.square().sum().float()
    ds0_total = ds0_sq.pow(1.0 / 2.0)
    ds0_half = ds0_total * 1.0 / float(2)       # scaled_norm for a data-parallel world of 2
    ds0_avg = ds0_half + ds0_half                # all_reduce(SUM) of two equal values
    ds0_coef = torch.min(torch.tensor([1.0]), torch.tensor([1.0]) / (ds0_avg + 1e-6))
    # DeepSpeed ZeRO-1/2 (stage_1_and_2.get_grad_norm_direct): norms in double, square, sum, float
    zs = torch.stack([torch.norm(t.double(), 2.0) for t in ts]).square().sum().float()
    z_total = zs.pow(1.0 / 2.0)
    z_global = torch.norm(torch.stack([z_total]), p=2)   # scaled_global_norm over one group
    z_clip = torch.clamp(((z_global / 1.0) + 1e-6) / 1.0, min=1.0)
    z_combined = z_clip * 1.0
    z_inv = 1. / z_combined
    # torch.nn.utils.clip_grad_norm_ with max_norm 1.0 and 0.5
    torch_total = torch.norm(stacked, 2.0)
    coef1 = torch.clamp(1.0 / (torch_total + 1e-6), max=1.0)
    coef05 = torch.clamp(0.5 / (torch_total + 1e-6), max=1.0)
    # the sum kernel alone, on the squares of the float norms, and on raw vectors
    sums = [float(torch.from_numpy(x.copy()).sum()) for x in xs]
    sums64 = [float(torch.from_numpy(x.copy()).double().square().sum()) for x in xs]
    return {
        "seed": seed, "sizes": sizes, "x": [x.tolist() for x in xs],
        "norm_f32": norm_f32, "norm_f64": norm_f64, "sum_f32": sums, "sumsq_f64": sums64,
        "stacked_sq_sum": float(stacked.square().sum()),
        "ds0_total": float(ds0_total), "ds0_avg_world2": float(ds0_avg), "ds0_coef": float(ds0_coef),
        "zero12_sq": float(zs), "zero12_total": float(z_total), "zero12_global": float(z_global),
        "zero12_inv_combined": float(z_inv),
        "torch_total": float(torch_total), "torch_coef_max1": float(coef1), "torch_coef_max05": float(coef05),
    }


def main():
    golden = {
        "torch_version": torch.__version__,
        "cpu_capability": "AVX2",
        "adamw": run(lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), 1),
        "adamw_betas": run(lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.85, 0.99), eps=1e-6, weight_decay=0.1), 2,
                           betas_per_step=[[0.85, 0.99], [0.8, 0.99], [0.81, 0.99], [0.9, 0.999], [0.9, 0.999],
                                           [0.95, 0.98]][:STEPS]),
        "adam_l2": run(lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), 3),
        "adam": run(lambda ps: torch.optim.Adam(ps, lr=1e-3), 4),
        "sgd_momentum": run(lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, dampening=0.1, weight_decay=0.01), 5),
        "sgd_nesterov": run(lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, nesterov=True, weight_decay=1e-3), 6),
        "sgd_plain": run(lambda ps: torch.optim.SGD(ps, lr=1e-3), 7),
        "adagrad": run(lambda ps: torch.optim.Adagrad(ps, lr=1e-2, lr_decay=0.01, weight_decay=0.01,
                                                      initial_accumulator_value=0.1, eps=1e-10), 8),
        "norms": norms_case(9),
    }
    json.dump(golden, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
