#!/usr/bin/python3
"""Goldens for package profiler: what DeepSpeed's own FLOPS profiler prints.

Runs deepspeed/profiling/flops_profiler/profiler.py -- the file itself, taken from a DeepSpeed
checkout and imported alone with small stand-ins for the rest of DeepSpeed -- on our own
plain-PyTorch twins of dszero's models, and writes for each case

    <case>.json   the case (model shape, micro-batch, options, engine header and timers) and the
                  forward latency DeepSpeed measured for every module (module.__duration__)
    <case>.txt    what print_model_profile printed

plus formats.json: DeepSpeed's number formatting helpers and Python's round/repr on a table of
numbers. The Go tests rebuild each report from dszero's own module counts
(model.FlopCounter) and the recorded latencies, and compare the text byte for byte.

The twins (written here, not copied):
  * TinyGPT  -- the reference harness's TinyGPT (shared/reference/harness/common.py) with its
    sizes as parameters and an optional tied head: eager attention with q @ k^T, F.softmax, att @ v.
  * TinyMLP  -- the harness's TinyMLP, F.relu in the root's forward.
  * <Family>ForCausalLM -- transformers' Llama/Qwen2/Qwen3 module tree (class and attribute names,
    the calls each forward makes: SiLUActivation calls nn.functional.silu, RMSNorm uses pow/mean/
    rsqrt, the rotary embedding computes inv_freq @ position_ids, attention calls
    F.scaled_dot_product_attention as attn_implementation="sdpa" does).

torch 1.13 (Debian's) stands in for torch 2: F.scaled_dot_product_attention is supplied (math
form, computed with torch functions the profiler does not wrap), required_torch_version answers
True so the profiler wraps it, and ModuleList prints as torch >= 2.0 prints it (runs of identical
children folded into "(0-1): 2 x Block(...)", no extra_repr line of its own).

Regenerate (Debian 12, python3-torch 1.13.1), from the repository root:

    git -C DEEPSPEED_CHECKOUT show HEAD:deepspeed/profiling/flops_profiler/profiler.py > /tmp/profiler.py
    /usr/bin/python3 profiler/testdata/gen_golden.py /tmp/profiler.py "DeepSpeed 0.19.6 edaa722" profiler/testdata

The latencies are measured, so every regeneration rewrites the .txt and .json together.
"""
import importlib.util
import json
import logging
import math
import os
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

# Originals, captured before the profiler wraps them, for the SDPA stand-in.
_matmul = torch.matmul
_softmax = torch.softmax
# DeepSpeed's stop_profile does not restore Tensor.__matmul__ or F.scaled_dot_product_attention,
# so each later start_profile wraps the wrapper and counts them once more; every case restores
# them (see restore_unreloaded).
_tensor_matmul = torch.Tensor.__matmul__


def install_stand_ins():
    """The parts of DeepSpeed profiler.py imports, and torch 2's behaviour it relies on."""

    class _Accel:
        def synchronize(self):
            pass

    mods = {
        "deepspeed": types.ModuleType("deepspeed"),
        "deepspeed.accelerator": types.ModuleType("deepspeed.accelerator"),
        "deepspeed.utils": types.ModuleType("deepspeed.utils"),
        "deepspeed.moe": types.ModuleType("deepspeed.moe"),
        "deepspeed.moe.layer": types.ModuleType("deepspeed.moe.layer"),
        "deepspeed.utils.timer": types.ModuleType("deepspeed.utils.timer"),
        "deepspeed.utils.torch": types.ModuleType("deepspeed.utils.torch"),
        "einops": types.ModuleType("einops"),
    }
    mods["deepspeed.accelerator"].get_accelerator = lambda: _Accel()
    mods["deepspeed.utils"].logger = logging.getLogger("deepspeed")
    mods["deepspeed.moe.layer"].MoE = type("MoE", (nn.Module,), {})
    t = mods["deepspeed.utils.timer"]
    t.FORWARD_GLOBAL_TIMER, t.BACKWARD_GLOBAL_TIMER, t.STEP_GLOBAL_TIMER = "fwd", "bwd", "step"
    mods["deepspeed.utils.torch"].required_torch_version = lambda min_version=None, max_version=None: True
    mods["einops"].einsum = lambda *args: None
    sys.modules.update(mods)

    if not hasattr(F, "scaled_dot_product_attention"):

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            s = _matmul(q, k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
            if is_causal:
                T, S = q.shape[-2], k.shape[-2]
                s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
            return _matmul(_softmax(s, dim=-1), v)

        F.scaled_dot_product_attention = sdpa
    global _sdpa_original
    _sdpa_original = F.scaled_dot_product_attention

    def module_list_repr(self):
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs = []  # [first, last, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for first, last, r in runs:
            s = f"({first}): {r}" if first == last else f"({first}-{last}): {last - first + 1} x {r}"
            head, *rest = s.split("\n")
            lines.append("\n".join([head] + ["  " + x for x in rest]))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    nn.ModuleList.__repr__ = module_list_repr


def load_profiler(path):
    spec = importlib.util.spec_from_file_location("ds_flops_profiler", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------
# Twins
# ---------------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.nh
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLPBlock(nn.Module):
    def __init__(self, C, M):
        super().__init__()
        self.fc = nn.Linear(C, M)
        self.proj = nn.Linear(M, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, M, eps):
        super().__init__()
        self.ln1 = nn.LayerNorm(C, eps=eps)
        self.attn = CausalSelfAttention(C, NH)
        self.ln2 = nn.LayerNorm(C, eps=eps)
        self.mlp = MLPBlock(C, M)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, V, ctx, C, NH, L, M, tied, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(ctx, C)
        self.blocks = nn.ModuleList([Block(C, NH, M, eps) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.lm_head = nn.Linear(C, V, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))[None]
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


class TinyMLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.n = len(sizes) - 1

    def forward(self, x, y):
        h = x
        for i in range(self.n):
            h = getattr(self, f"fc{i + 1}")(h)
            if i < self.n - 1:
                h = F.relu(h)
        return F.mse_loss(h.float(), y.float())


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, x):
        v = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(v + self.variance_epsilon)).to(x.dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class SiLUActivation(nn.Module):
    def forward(self, x):
        return nn.functional.silu(x)


class RotaryEmbedding(nn.Module):
    def __init__(self, D, theta):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, D, 2).float() / D), persistent=False)

    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        pos = position_ids[:, None, :].float()
        freqs = (inv @ pos).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, nH, nKV, D = c["H"], c["nH"], c["nKV"], c["D"]
        self.nH, self.nKV, self.D = nH, nKV, D
        self.q_proj = nn.Linear(H, nH * D, bias=c["qkv_bias"])
        self.k_proj = nn.Linear(H, nKV * D, bias=c["qkv_bias"])
        self.v_proj = nn.Linear(H, nKV * D, bias=c["qkv_bias"])
        self.o_proj = nn.Linear(nH * D, H, bias=c["o_bias"])
        if c["qk_norm"]:
            self.q_norm = c["cls"]("RMSNorm")(D, c["eps"])
            self.k_norm = c["cls"]("RMSNorm")(D, c["eps"])

    def forward(self, h, cos, sin):
        B, T, _ = h.shape
        shape = (B, T, -1, self.D)
        q, k, v = self.q_proj(h).view(shape), self.k_proj(h).view(shape), self.v_proj(h).view(shape)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nH // self.nKV
        k = k[:, :, None].expand(B, self.nKV, rep, T, self.D).reshape(B, self.nH, T, self.D)
        v = v[:, :, None].expand(B, self.nKV, rep, T, self.D).reshape(B, self.nH, T, self.D)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.D ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I, b = c["H"], c["I"], c["mlp_bias"]
        self.gate_proj = nn.Linear(H, I, bias=b)
        self.up_proj = nn.Linear(H, I, bias=b)
        self.down_proj = nn.Linear(I, H, bias=b)
        self.act_fn = SiLUActivation()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = c["cls"]("Attention")(c)
        self.mlp = c["cls"]("MLP")(c)
        self.input_layernorm = c["cls"]("RMSNorm")(c["H"], c["eps"])
        self.post_attention_layernorm = c["cls"]("RMSNorm")(c["H"], c["eps"])

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["V"], c["H"], c["pad"])
        self.layers = nn.ModuleList([c["cls"]("DecoderLayer")(c) for _ in range(c["L"])])
        self.norm = c["cls"]("RMSNorm")(c["H"], c["eps"])
        self.rotary_emb = c["cls"]("RotaryEmbedding")(c["D"], c["theta"])

    def forward(self, ids, position_ids):
        h = self.embed_tokens(ids)
        if position_ids is None:
            position_ids = torch.arange(ids.shape[1]).unsqueeze(0)
        cos, sin = self.rotary_emb(h, position_ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)


class ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = c["cls"]("Model")(c)
        self.lm_head = nn.Linear(c["H"], c["V"], bias=False)
        if c["tied"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids, targets, position_ids=None):
        logits = self.lm_head(self.model(ids, position_ids))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


_BASES = {"Attention": Attention, "MLP": MLP, "DecoderLayer": DecoderLayer, "Model": Backbone,
          "RMSNorm": RMSNorm, "RotaryEmbedding": RotaryEmbedding, "ForCausalLM": ForCausalLM}


def hf_family(prefix):
    made = {}

    def cls(kind):
        if kind not in made:
            made[kind] = type(prefix + kind, (_BASES[kind],), {})
        return made[kind]

    return cls


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
class FakeTimer:
    def __init__(self, ms):
        self.ms = ms

    def elapsed(self, reset=True):
        return self.ms


class FakeEngine:
    """The attributes print_model_profile reads from a DeepSpeedEngine."""

    def __init__(self, e):
        self.world_size, self.dp_world_size, self.mp_world_size = e["world_size"], e["dp"], e["mp"]
        self.micro = e["micro_batch"]
        self.has_moe_layers = False
        self.ms = {"fwd": e["fwd_ms"], "bwd": e["bwd_ms"], "step": e["step_ms"]}

    def train_micro_batch_size_per_gpu(self):
        return self.micro

    def wall_clock_breakdown(self):
        return True

    def timers(self, name):
        return FakeTimer(self.ms[name])


CASES = [
    # The harness's TinyGPT as DeepSpeed trained it: 2 ranks, micro-batch 4, T = 32; defaults.
    dict(case="gpt_tiny", kind="gpt", model=dict(V=64, ctx=32, C=64, NH=4, L=2, M=256, tied=False),
         B=4, T=32, engine=dict(world_size=2, dp=2, mp=1, micro_batch=4),
         options=dict(profile_step=1, module_depth=-1, top_modules=1, detailed=True, recompute_fwd_factor=0.0)),
    # Tied head, M != 4C, T < context, recompute factor; only the blocks and the root timed, the
    # blocks alike (what dszero measures), so the ModuleList folds them.
    dict(case="gpt_tied_units", kind="gpt", model=dict(V=96, ctx=48, C=48, NH=3, L=3, M=128, tied=True),
         B=2, T=20, engine=dict(world_size=4, dp=4, mp=1, micro_batch=2), units_only=True,
         options=dict(profile_step=3, module_depth=2, top_modules=3, detailed=True, recompute_fwd_factor=0.5)),
    dict(case="llama_tiny", kind="llama", family="Llama",
         model=dict(V=256, H=64, I=128, L=2, nH=4, nKV=2, D=16, eps=1e-5, theta=500000.0, tied=False, pad=None,
                    qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False),
         B=2, T=16, engine=dict(world_size=1, dp=1, mp=1, micro_batch=2),
         options=dict(profile_step=1, module_depth=-1, top_modules=2, detailed=True, recompute_fwd_factor=0.0)),
    # Position ids given per row; q/k norms; tied; no detailed tree.
    dict(case="qwen3_tiny", kind="llama", family="Qwen3", row_positions=True,
         model=dict(V=256, H=64, I=128, L=2, nH=4, nKV=2, D=32, eps=1e-6, theta=1e6, tied=True, pad=None,
                    qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=True),
         B=3, T=8, engine=dict(world_size=8, dp=8, mp=1, micro_batch=3),
         options=dict(profile_step=0, module_depth=3, top_modules=1, detailed=False, recompute_fwd_factor=0.0)),
    # q/k/v biases and a padding row; standalone (no engine: get_model_profile's layout).
    dict(case="qwen2_tiny_standalone", kind="llama", family="Qwen2",
         model=dict(V=256, H=64, I=128, L=2, nH=4, nKV=2, D=16, eps=1e-6, theta=1e6, tied=True, pad=0,
                    qkv_bias=True, o_bias=False, mlp_bias=False, qk_norm=False),
         B=2, T=12, engine=None,
         options=dict(profile_step=1, module_depth=-1, top_modules=3, detailed=True, recompute_fwd_factor=0.0)),
    dict(case="mlp_tiny", kind="mlp", model=dict(sizes=[16, 64, 64, 8]), B=8, T=1,
         engine=dict(world_size=2, dp=2, mp=1, micro_batch=8),
         options=dict(profile_step=1, module_depth=-1, top_modules=1, detailed=True, recompute_fwd_factor=0.0)),
]


def build(case):
    m = case["model"]
    B, T = case["B"], case["T"]
    g = torch.Generator().manual_seed(7)
    if case["kind"] == "gpt":
        net = TinyGPT(m["V"], m["ctx"], m["C"], m["NH"], m["L"], m["M"], m["tied"])
        ids = torch.randint(0, m["V"], (B, T), generator=g)
        return net, (ids, torch.randint(0, m["V"], (B, T), generator=g))
    if case["kind"] == "mlp":
        s = m["sizes"]
        return TinyMLP(s), (torch.randn(B, s[0], generator=g), torch.randn(B, s[-1], generator=g))
    c = dict(m, cls=hf_family(case["family"]))
    net = c["cls"]("ForCausalLM")(c)
    ids = torch.randint(0, m["V"], (B, T), generator=g)
    pos = torch.arange(T).unsqueeze(0).expand(B, T).contiguous() if case.get("row_positions") else None
    return net, (ids, torch.randint(0, m["V"], (B, T), generator=g), pos)


def run_case(prof_mod, case, out_dir):
    torch.manual_seed(1)
    net, args = build(case)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    o = case["options"]
    loss = net(*args)  # warm-up
    loss.backward()
    opt.step()
    opt.zero_grad()

    eng = None
    if case["engine"] is not None:
        eng = dict(case["engine"])
    prof = prof_mod.FlopsProfiler(net, ds_engine=None, recompute_fwd_factor=o["recompute_fwd_factor"])
    t0 = time.time()
    prof.start_profile()
    loss = net(*args)
    prof.stop_profile()
    t1 = time.time()
    loss.backward()
    t2 = time.time()
    opt.step()
    t3 = time.time()
    if case.get("units_only"):
        # Keep the root's latency and give every block the same one; clear the rest.
        block = 0.0
        for name, mod in net.named_modules():
            if name.startswith("blocks.") and name.count(".") == 1:
                block = max(block, mod.__duration__)
        for name, mod in net.named_modules():
            if name == "":
                continue
            mod.__duration__ = block if (name.startswith("blocks.") and name.count(".") == 1) else 0
    if eng is not None:
        eng.update(fwd_ms=(t1 - t0) * 1000.0, bwd_ms=(t2 - t1) * 1000.0, step_ms=(t3 - t2) * 1000.0)
        prof.ds_engine = FakeEngine(eng)
    txt = os.path.join(out_dir, case["case"] + ".txt")
    prof.print_model_profile(profile_step=o["profile_step"] + 1, module_depth=o["module_depth"],
                             top_modules=o["top_modules"], detailed=o["detailed"], output_file=txt)
    durations = {name: float(mod.__duration__) for name, mod in net.named_modules()}
    record = dict(case=case["case"], kind=case["kind"], family=case.get("family"), model=case["model"],
                  B=case["B"], T=case["T"], row_positions=bool(case.get("row_positions")),
                  options=o, step=o["profile_step"] + 1, engine=eng, durations=durations,
                  flops={name: prof_mod.get_module_flops(mod) for name, mod in net.named_modules()},
                  macs={name: prof_mod.get_module_macs(mod) for name, mod in net.named_modules()},
                  params={name: mod.__params__ for name, mod in net.named_modules()})
    prof.end_profile()
    restore_unreloaded()
    return record


def restore_unreloaded():
    torch.Tensor.__matmul__ = _tensor_matmul
    F.scaled_dot_product_attention = _sdpa_original


FORMAT_NUMBERS = [0, 1, 0.5, 0.001, 0.0009999, 1.5e-5, 1e-9, 2.675, 0.125, 0.135, 999.994, 999.995, 999.9951,
                  1000, 1234.5678, 12345.678, 123456.78, 999999.999, 1e6, 1005000, 123456789, 1.23456789e9,
                  999999999999, 1e12, 4.2e15, 1.23456789e17, 3.5e-4, 7.25e-3, 110336, 16534990000000,
                  0.0123456, 42, 1999995, 100000.5e6]
REPR_NUMBERS = [0.0, 1.0, 12.0, 433.07, 1e16, 1.5e16, 123456789012345.6, 1e-4, 1e-5, 1.5e-5, 2.5, 1e22,
                0.1, 100.25, 5e-324, 9999999999999998.0]
ROUND_NUMBERS = [2.675, 0.125, 0.135, 1.005, 1234.5678, 0.0049999, 0.005, 99.995, 1e22, 123.456e-9]


def formats(prof_mod):
    f = prof_mod
    return dict(
        number_to_string=[[x, f.number_to_string(x)] for x in FORMAT_NUMBERS],
        macs_to_string=[[x, f.macs_to_string(x)] for x in FORMAT_NUMBERS if x == int(x)],
        flops_to_string=[[x, f.flops_to_string(x)] for x in FORMAT_NUMBERS],
        params_to_string=[[x, f.params_to_string(x)] for x in FORMAT_NUMBERS if x == int(x)],
        duration_to_string=[[x, f.duration_to_string(x)] for x in FORMAT_NUMBERS],
        repr=[[x, repr(x)] for x in REPR_NUMBERS],
        round2_repr=[[x, repr(round(x, 2))] for x in ROUND_NUMBERS],
    )


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, source, out_dir = sys.argv[1:]
    install_stand_ins()
    prof_mod = load_profiler(path)
    torch.set_num_threads(1)
    os.makedirs(out_dir, exist_ok=True)
    meta = dict(deepspeed=source, torch=torch.__version__, python=sys.version.split()[0])
    for case in CASES:
        rec = run_case(prof_mod, case, out_dir)
        rec["generated_by"] = meta
        with open(os.path.join(out_dir, case["case"] + ".json"), "w") as fh:
            json.dump(rec, fh, indent=1)
            fh.write("\n")
    fm = formats(prof_mod)
    fm["generated_by"] = meta
    with open(os.path.join(out_dir, "formats.json"), "w") as fh:
        json.dump(fm, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
