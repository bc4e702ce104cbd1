"""Reference facts: DeepSpeed's scheduler curves, loss-scaler state machine,
memory estimators and zero_to_fp32 partition arithmetic, computed by
DeepSpeed's own code and written as conformance cases of their own kind.

usage: python3 facts.py OUT_ROOT

writes OUT_ROOT/{lr_schedules,loss_scaler,estimators,zero_to_fp32}/facts.json
(the format: conformance/doc.go, "Reference facts"). Nothing here is computed
by a formula of ours: every expected value is what DeepSpeed's classes and
functions return when called the way its engine calls them. Needs only
DeepSpeed's Python source on PYTHONPATH (see README.md; no C++ op is built,
no process group is started) and Debian's python3-torch.
"""
import json
import math
import os
import sys

import torch

import deepspeed
from deepspeed.runtime import lr_schedules
from deepspeed.runtime.config import get_dynamic_loss_scale_args, get_initial_dynamic_scale
from deepspeed.runtime.fp16 import loss_scaler as ls
from deepspeed.runtime.fp16.fused_optimizer import FP16_Optimizer
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
from deepspeed.utils import zero_to_fp32

# update_scale logs through dist.get_rank(); there is no process group here.
ls.dist.get_rank = lambda *a, **k: 0


def header(kind, source):
    return {"kind": kind, "deepspeed_version": deepspeed.__version__, "torch_version": torch.__version__,
            "source": source, "command": "python3 conformance/reference/facts.py OUT_ROOT"}


# --- lr schedules -----------------------------------------------------------

SCHEDULES = [
    ("WarmupLR_log", "AdamW", {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 10}}),
    ("WarmupLR_linear", "AdamW", {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 7, "warmup_type": "linear"}}),
    ("WarmupLR_one_step", "AdamW", {"type": "WarmupLR", "params": {"warmup_num_steps": 1}}),
    ("WarmupDecayLR_linear", "AdamW", {"type": "WarmupDecayLR", "params": {"total_num_steps": 20, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}}),
    ("WarmupDecayLR_log", "AdamW", {"type": "WarmupDecayLR", "params": {"total_num_steps": 25, "warmup_max_lr": 2e-3, "warmup_num_steps": 8}}),
    ("WarmupCosineLR", "AdamW", {"type": "WarmupCosineLR", "params": {"total_num_steps": 30, "warmup_num_steps": 6, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}}),
    ("WarmupCosineLR_log", "AdamW", {"type": "WarmupCosineLR", "params": {"total_num_steps": 20, "warmup_num_steps": 5}}),
    ("OneCycle", "AdamW", {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 5, "cycle_second_step_size": 4, "decay_lr_rate": 0.1, "decay_step_size": 2, "cycle_momentum": True, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95, "decay_mom_rate": 0.05}}),
    ("OneCycle_stairs", "SGD", {"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1, "cycle_first_step_size": 6, "cycle_first_stair_count": 3, "cycle_momentum": False}}),
    ("LRRangeTest", "AdamW", {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 3, "lr_range_test_step_rate": 2.0}}),
    ("LRRangeTest_staircase", "AdamW", {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 1e-3, "lr_range_test_step_size": 4, "lr_range_test_step_rate": 0.5, "lr_range_test_staircase": True}}),
]
OPT_LR = 1e-3
STEPS = 32


def lr_schedules_facts():
    entries = []
    for name, opt, sched in SCHEDULES:
        p = torch.nn.Parameter(torch.zeros(1))
        if opt == "SGD":
            o = torch.optim.SGD([p], lr=OPT_LR, momentum=0.9)
        else:
            o = torch.optim.AdamW([p], lr=OPT_LR, betas=(0.9, 0.999))
        # deepspeed/runtime/engine.py _scheduler_from_config: getattr(lr_schedules, type)(optimizer, **params)
        s = getattr(lr_schedules, sched["type"])(o, **sched["params"])
        lrs, betas = [], []
        for _ in range(STEPS):
            g = o.param_groups[0]
            lrs.append(g["lr"])  # the lr the optimizer step runs with
            if "betas" in g:
                betas.append(list(g["betas"]))
            elif "momentum" in g:
                betas.append([g["momentum"], 0.0])
            s.step()  # the engine steps the scheduler after each optimizer step
        e = {"name": name,
             "ds_config": {"train_micro_batch_size_per_gpu": 1,
                           "optimizer": {"type": opt, "params": {"lr": OPT_LR, "torch_adam": True} if opt != "SGD" else {"lr": OPT_LR, "momentum": 0.9}},
                           "scheduler": sched},
             "lr": lrs}
        if sched["type"] == "OneCycle" and sched["params"].get("cycle_momentum", True):
            e["betas"] = betas
        entries.append(e)
    return dict(header("lr_schedule", "deepspeed/runtime/lr_schedules.py, stepped as engine.py does"), entries=entries)


# --- loss scaler -----------------------------------------------------------

def overflow_pattern(name, n):
    """Overflow sequences that exercise every branch: hysteresis, the window,
    the minimum scale, consecutive_hysteresis."""
    if name == "burst":
        return [i in (0, 1, 2, 9, 10) for i in range(n)]
    if name == "periodic":
        return [i % 7 == 3 for i in range(n)]
    if name == "to_min":
        return [True] * n
    return [False] * n


SCALERS = [
    # (name, zero stage, fp16 block, pattern, steps)
    ("zero_default_burst", 1, {"enabled": True}, "burst", 24),
    ("zero_window3_hyst2", 2, {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 3, "hysteresis": 2}, "periodic", 40),
    ("zero_window2_consecutive", 3, {"enabled": True, "initial_scale_power": 6, "loss_scale_window": 2, "hysteresis": 3, "consecutive_hysteresis": True}, "periodic", 40),
    ("zero_to_min_scale", 2, {"enabled": True, "initial_scale_power": 3, "hysteresis": 1, "min_loss_scale": 2}, "to_min", 6),
    ("zero_no_overflow_growth", 1, {"enabled": True, "initial_scale_power": 4, "loss_scale_window": 4}, "none", 20),
    ("fp16_optimizer_window3", 0, {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 3, "hysteresis": 2}, "periodic", 40),
    ("fp16_optimizer_burst", 0, {"enabled": True, "initial_scale_power": 5, "loss_scale_window": 4, "min_loss_scale": 4}, "burst", 24),
    ("fp16_optimizer_default", 0, {"enabled": True}, "periodic", 20),
]


def loss_scaler_facts():
    entries = []
    for name, stage, fp16, pattern, n in SCALERS:
        ds = {"train_micro_batch_size_per_gpu": 1, "fp16": fp16, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
        args = get_dynamic_loss_scale_args(ds)
        events = []
        if stage > 0:
            # the ZeRO optimizers: CreateLossScaler(dtype, static, dynamic, dynamic_loss_args)
            sc = ls.CreateLossScaler(torch.half, 0, True, args)
            for ov in overflow_pattern(pattern, n):
                ev = {"overflow": ov}
                try:
                    sc.update_scale(ov)
                except Exception as e:  # DeepSpeed raises at the minimum scale
                    ev["error"] = str(e)
                    events.append(ev)
                    break
                ev["scale"] = sc.cur_scale
                events.append(ev)
        else:
            # stage 0 fp16: FP16_Optimizer's own rule (_update_scale), with the
            # attributes its __init__ sets from dynamic_loss_args.
            fo = FP16_Optimizer.__new__(FP16_Optimizer)
            fo.dynamic_loss_scale, fo.cur_iter, fo.last_overflow_iter, fo.scale_factor = True, 0, -1, 2
            fo.cur_scale = args[ls.INITIAL_LOSS_SCALE] if args else get_initial_dynamic_scale(ds)
            fo.scale_window = args[ls.SCALE_WINDOW] if args else 1000
            fo.min_loss_scale = args[ls.MIN_LOSS_SCALE] if args else 1
            fo.verbose = False
            for ov in overflow_pattern(pattern, n):
                fo._update_scale(ov)
                events.append({"overflow": ov, "scale": fo.cur_scale})
        entries.append({"name": name, "ds_config": ds, "events": events})
    return dict(header("loss_scaler", "deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale (ZeRO), "
                       "fused_optimizer.py FP16_Optimizer._update_scale (stage 0)"), entries=entries)


# --- estimators -------------------------------------------------------------

def estimators_facts():
    entries = []
    grid = [(2_783_000_000, 65_000_000, 1, 1), (7_000_000_000, 262_144_000, 8, 1), (7_500_000_000, 50_000_000, 16, 4),
            (124_439_808, 38_597_376, 4, 1), (1_557_611_200, 80_411_200, 2, 3), (350_000_000, 51_511_296, 3, 1)]
    for total, largest, gpn, nodes in grid:
        for f in (1.5, 1.0, 2.0):
            for off in (True, False):
                cpu, gpu = estimate_zero2_model_states_mem_needs(total, gpn, nodes, off, f)
                entries.append({"fn": "zero2", "total_params": total, "num_gpus_per_node": gpn, "num_nodes": nodes,
                                "cpu_offload": off, "additional_buffer_factor": f, "cpu": cpu, "gpu": gpu})
            for off, offp in ((True, True), (True, False), (False, False)):
                for zi in (True, False):
                    cpu, gpu, largest_out = estimate_zero3_model_states_mem_needs(total, largest, gpn, nodes, off, offp, zi, f)
                    entries.append({"fn": "zero3", "total_params": total, "largest_layer_params": largest,
                                    "num_gpus_per_node": gpn, "num_nodes": nodes, "cpu_offload": off,
                                    "cpu_offload_params": offp, "zero_init": zi, "additional_buffer_factor": f,
                                    "cpu": cpu, "gpu": gpu})
    return dict(header("estimator", "deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs, "
                       "stage3.py estimate_zero3_model_states_mem_needs"), entries=entries)


# --- zero_to_fp32 partition arithmetic ---------------------------------------

class _State:
    """What zero_to_fp32.parse_model_states keeps of a model-states file."""

    def __init__(self, shapes):
        self.param_shapes = [shapes]


def saved_lengths(numels, world):
    """The lengths of single_partition_of_fp32_groups that DeepSpeed ≥ 0.16.5
    saves per rank (stage_1_and_2.py: the flat group padded to a multiple of
    2·world, each rank's padding stripped); zero_to_fp32 below is the judge."""
    total = sum(numels)
    align = 2 * world
    padded = align * math.ceil(total / align)
    size = padded // world
    return [max(0, min(size, total - r * size)) for r in range(world)]


def zero_to_fp32_facts():
    entries = []
    for world, numels in [(4, [5, 6]), (2, [3]), (3, [7, 1, 9]), (4, [64, 16, 4096, 64, 512, 8]), (8, [5]), (2, [10, 10])]:
        lens = saved_lengths(numels, world)
        flat = torch.arange(sum(numels), dtype=torch.float32)
        parts, at = [], 0
        for n in lens:
            parts.append([flat[at:at + n].clone()])
            at += n
        shapes = {f"p{i}": torch.Size([n]) for i, n in enumerate(numels)}
        sd = {}
        # raises "consumed … numels out of …" when the lengths are inconsistent
        zero_to_fp32._zero2_merge_trainable_params(sd, world, parts, [_State(shapes)])
        rebuilt = [sd[f"p{i}"].long().tolist() for i in range(len(numels))]
        entries.append({"stage": 2, "world": world, "numels": numels, "saved_lengths": lens,
                        "params_from_flat": [[r[0], r[-1] + 1] if r else [0, 0] for r in rebuilt]})
    for world in (1, 2, 3, 4, 8):
        for numel in (1, 2, 5, 10, 16, 17, 1000, 1023):
            part, pad = zero_to_fp32.zero3_partitioned_param_info(numel, world)
            entries.append({"stage": 3, "world": world, "numel": numel, "partitioned_numel": part, "padding": pad})
    return dict(header("zero_to_fp32", "deepspeed/utils/zero_to_fp32.py _zero2_merge_trainable_params, "
                       "zero3_partitioned_param_info"), entries=entries)


def main():
    out = sys.argv[1]
    for kind, fn in (("lr_schedules", lr_schedules_facts), ("loss_scaler", loss_scaler_facts),
                     ("estimators", estimators_facts), ("zero_to_fp32", zero_to_fp32_facts)):
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "facts.json"), "w") as f:
            json.dump(fn(), f, indent=1)
            f.write("\n")
        print("wrote", os.path.join(d, "facts.json"))


if __name__ == "__main__":
    main()
