#!/usr/bin/env python3
"""Run DeepSpeed's own partition functions on synthetic shapes; write deepspeed_rules.json.

The reference runs (deepspeed_layouts.json) only cover world size 2 with parameter counts that
need no padding. This generator covers the padding and ordering rules: it takes the source of
the functions below *verbatim* from a DeepSpeed git tag (parsed with ast, executed with a fake
tensor that only knows numel/narrow), so the golden file records what DeepSpeed computes, not
our reading of it. Only the few lines that DeepSpeed writes inline in a constructor are
transcribed here, each marked TRANSCRIBED with its source.

Functions taken verbatim:
  deepspeed/runtime/utils.py                      align_dense_tensors
  deepspeed/runtime/zero/stage_1_and_2.py         _round_robin_reorder, get_data_parallel_partitions
  deepspeed/utils/mixed_precision_linkage.py      _init_lp_to_hp_mapping
  deepspeed/utils/tensor_fragment.py              get_hp_fragment_mapping
  deepspeed/runtime/zero/stage3.py                _create_fp16_sub_groups
  deepspeed/runtime/zero/partition_parameters.py  _padding_size, _aligned_size
  deepspeed/utils/zero_to_fp32.py                 zero3_partitioned_param_info

Usage: python3 gen_deepspeed_rules.py <DeepSpeed git dir> [tag] > deepspeed_rules.json
(the DeepSpeed repository: git clone https://github.com/deepspeedai/DeepSpeed; tag v0.14.5)
"""
import ast
import json
import math
import subprocess
import sys
import textwrap
import types


class T:
    """Fake 1-D tensor: numel plus the offset it was narrowed from."""

    def __init__(self, n, start=0, name=None):
        self.n, self.start, self.name = n, start, name
        self.device, self.dtype = "cpu", "fp32"

    def numel(self):
        return self.n

    def narrow(self, dim, start, length):
        assert dim == 0 and 0 <= start and start + length <= self.n, (start, length, self.n)
        return T(length, self.start + start)

    def flatten(self):
        return self

    # stage 3 parameter protocol
    def partition_numel(self):
        return self.ps


class FakeDist:
    @staticmethod
    def get_world_size(group=None):
        return group

    @staticmethod
    def get_rank(group=None):
        raise AssertionError("rank is passed explicitly")


def stub(*args, **kwargs):
    raise AssertionError("not used")


def load(git_dir, tag, path, names):
    src = subprocess.check_output(["git", "-C", git_dir, "show", f"{tag}:{path}"], text=True)
    out = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in out:
            seg = textwrap.dedent(ast.get_source_segment(src, node))
            g = {"torch": types.SimpleNamespace(zeros=lambda n, **kw: T(n)), "dist": FakeDist, "math": math,
                 "types": types, "get_full_hp_param": stub, "get_full_hp_grad": stub,
                 "set_full_hp_param": stub, "set_full_hp_grad": stub,
                 "tensor_fragment": lambda **kw: types.SimpleNamespace(**kw),
                 "fragment_address": lambda numel, start: types.SimpleNamespace(numel=numel, start=start)}
            exec(compile(seg, f"{tag}:{path}", "exec"), g)
            out[node.name] = g[node.name]
    missing = set(names) - set(out)
    assert not missing, (path, missing)
    return out


def flat_case(fn, shapes, world, round_robin, rank_pad_rules):
    params = [T(n, name=f"p{i}") for i, n in enumerate(shapes)]
    if round_robin:
        order_t, idx = fn["_round_robin_reorder"](None, params, world)
        order = [int(p.name[1:]) for p in order_t]
    else:
        order_t, order = params, list(range(len(params)))
    alignment = 2 * world  # TRANSCRIBED stage_1_and_2.py: nccl_start_alignment_factor(=2) * dp world size
    padded = fn["align_dense_tensors"](list(order_t), alignment)
    flat = T(sum(t.numel() for t in padded))
    self = types.SimpleNamespace(real_dp_process_group=[world])
    parts = fn["get_data_parallel_partitions"](self, flat, 0)
    orig_numel = sum(shapes)
    ranks = []
    for r in range(world):
        # TRANSCRIBED stage_1_and_2.py _link_all_hp_params: partition_size = numel // world,
        # link_hp_params(lp_param_list=self.bit16_groups[i], ...) -- the ORIGINAL order.
        ps = flat.numel() // world
        mapping = []
        for lp, lp_start in fn["_init_lp_to_hp_mapping"](params, r * ps, ps, None):
            m = fn["get_hp_fragment_mapping"](lp, lp_start, T(ps), None, None, False, 0, r * ps, ps)
            mapping.append([lp.name, m.hp_fragment_address.start, m.hp_fragment_address.numel,
                            m.lp_fragment_address.start])
        ranks.append({"partition": [parts[r].start, parts[r].numel()],
                      "group_paddings": {k: rule(parts, r, orig_numel, flat.numel(), world)
                                         for k, rule in rank_pad_rules.items()},
                      "param_slice_mappings": mapping})
    return {"numels": shapes, "world": world, "round_robin": round_robin, "order": order,
            "padded": flat.numel(), "ranks": ranks}


def pad_v0145(parts, r, orig, padded, world):
    # TRANSCRIBED v0.14.5 stage_1_and_2.py __init__: padding recorded on the last rank only.
    return padded - orig if r == world - 1 else 0


def pad_v0165(parts, r, orig, padded, world):
    # TRANSCRIBED v0.16.5+ (PR #6974) stage_1_and_2.py __init__: the padding inside rank r's partition.
    left_boundary = sum([t.numel() for t in parts[:r]])
    curr_partition_size = parts[r].numel()
    if orig <= left_boundary:
        return curr_partition_size
    elif orig < left_boundary + curr_partition_size:
        return left_boundary + curr_partition_size - orig
    return 0


def stage3_case(fn, shapes, world, sub_group_size):
    ps_self = types.SimpleNamespace(num_partitions=world)
    ps_self._padding_size = lambda p: fn["_padding_size"](ps_self, p)
    ps_self._partition_world_size = lambda p: world  # later tags ask this (ZeRO++ hpZ); plain ZeRO-3: dp world
    params = []
    per = []
    for n in shapes:
        p = T(n)
        p.ds_numel = n
        aligned = fn["_aligned_size"](ps_self, p)
        p.ps = aligned // world  # TRANSCRIBED partition_parameters.py _partition_param: tensor_size // num_partitions
        pn, pad = fn["zero3_partitioned_param_info"](n, world)
        assert pn == p.ps, (n, world)
        params.append(p)
        per.append([p.ps, fn["_padding_size"](ps_self, p)])
    self = types.SimpleNamespace(sub_group_size=sub_group_size)
    groups = fn["_create_fp16_sub_groups"](self, params)
    ids = {id(p): i for i, p in enumerate(params)}
    return {"numels": shapes, "world": world, "sub_group_size": sub_group_size,
            "partition_and_padding": per, "sub_groups": [[ids[id(p)] for p in g] for g in groups]}


def main(git_dir, tag):
    fn = {}
    fn.update(load(git_dir, tag, "deepspeed/runtime/utils.py", {"align_dense_tensors"}))
    fn.update(load(git_dir, tag, "deepspeed/runtime/zero/stage_1_and_2.py",
                   {"_round_robin_reorder", "get_data_parallel_partitions"}))
    fn.update(load(git_dir, tag, "deepspeed/utils/mixed_precision_linkage.py", {"_init_lp_to_hp_mapping"}))
    fn.update(load(git_dir, tag, "deepspeed/utils/tensor_fragment.py", {"get_hp_fragment_mapping"}))
    fn.update(load(git_dir, tag, "deepspeed/runtime/zero/stage3.py", {"_create_fp16_sub_groups"}))
    fn.update(load(git_dir, tag, "deepspeed/runtime/zero/partition_parameters.py",
                   {"_padding_size", "_aligned_size"}))
    fn.update(load(git_dir, tag, "deepspeed/utils/zero_to_fp32.py", {"zero3_partitioned_param_info"}))

    shape_sets = [[5, 6], [1], [7, 3, 9, 1, 4], [64, 3, 100, 17], [2, 2, 2, 2, 2, 2, 2], [13, 1, 1, 1, 30]]
    flat = []
    for shapes in shape_sets:
        for world in [1, 2, 3, 4, 8]:
            for rr in [False, True]:
                if rr and world == 1:
                    continue
                flat.append(flat_case(fn, shapes, world, rr, {"v0.14.5": pad_v0145, "v0.16.5+": pad_v0165}))
    s3 = []
    for shapes in shape_sets:
        for world in [1, 2, 3, 8]:
            for sg in [0, 10, 64, 10**9]:
                s3.append(stage3_case(fn, shapes, world, sg))
    tagged = subprocess.check_output(["git", "-C", git_dir, "rev-parse", tag + "^{commit}"], text=True).strip()
    out = {"source": f"DeepSpeed {tag} ({tagged}) functions run by gen_deepspeed_rules.py", "flat": flat, "stage3": s3}
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "v0.14.5")
