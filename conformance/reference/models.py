"""The models a case describes, their weights and their data.

A case's init/models.json lists, for each model key, the parameters (name, shape) in
named_parameters() order, and the files with the initial weights and the data (the format
is documented in conformance/doc.go). build_model() makes the PyTorch module from that
description alone, as dszero does:

* wte, wpe, blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj}, ln_f[, lm_head]:
  a pre-LayerNorm GPT-2 decoder (learned positions, no dropout, LayerNorm eps 1e-5,
  tanh-GELU, causal softmax attention with head size 16 unless the entry says "heads",
  cross-entropy on fp32 logits; without lm_head the output reuses wte.weight);
  with set_seq_parallel(SeqParallel) one rank of a DeepSpeed-Ulysses group (below);
* fc1, fc2, ... (weight, bias): Linear layers with ReLU between them and a mean-squared
  error on fp32 outputs;
* model.embed_tokens, model.layers.<i>.{self_attn, mlp, input_layernorm,
  post_attention_layernorm}, model.norm[, lm_head] ("arch": "llama"): a LlamaForCausalLM /
  Qwen2 / Qwen3 / Mistral of the entry's "llama_config" (a config.json), model/llama's own
  plain-PyTorch twin of transformers (model/llama/testdata/reference/llama_ref.py), fp32 only
  (with set_seq_parallel a Ulysses rank as the GPT: _llama_sp_attention),
  cross-entropy on the shifted tokens as GPT's.

These are, op for op, the harness's TinyGPT and TinyMLP (shared/reference/harness), so a
shipped case regenerated here gives the same numbers. With float16 parameters (an "fp16"
config) every op reads fp16 inputs, computes in fp32 and rounds its output to fp16 once,
as a GPU fp16 kernel would: torch 1.13 has no CPU half kernels.
"""
import json
import math
import os
import re
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
HEAD_SIZE = 16


# ----------------------------------------------------------------------------- safetensors
# python3-safetensors is not in Debian 12: a small reader/writer of the standard format
# (u64 little-endian header length, JSON header padded with spaces to 8 bytes, raw C-order data).
_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
_BY_NAME = {v: k for k, v in _DTYPES.items()}


def save_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            a = t.numpy()
            raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def load_safetensors(path):
    """Returns ({name: tensor} in file order, metadata)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = h["data_offsets"]
        dt = _BY_NAME[h["dtype"]]
        if dt == torch.bfloat16:
            t = torch.from_numpy(np.frombuffer(data[a:b], dtype="<i2").copy()).view(torch.bfloat16)
        else:
            npdt = torch.empty(0, dtype=dt).numpy().dtype
            t = torch.from_numpy(np.frombuffer(data[a:b], dtype=npdt.newbyteorder("<")).astype(npdt))
        out[name] = t.reshape(h["shape"])
    return out, meta


# ----------------------------------------------------------------------------- fp16 emulation
def _op(fn, *xs):
    """fn(*xs), or for fp16 inputs fn computed in fp32 and rounded to fp16 once."""
    if any(x.dtype == torch.float16 for x in xs):
        return fn(*(x.float() for x in xs)).half()
    return fn(*xs)


class Linear(nn.Linear):
    def forward(self, x):
        return _op(lambda x, *wb: F.linear(x, *wb), x, self.weight, *([] if self.bias is None else [self.bias]))


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return _op(lambda x, w, b: F.layer_norm(x, self.normalized_shape, w, b, self.eps), x, self.weight, self.bias)


# ----------------------------------------------------------------------------- GPT
class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = Linear(d, 3 * d)
        self.proj = Linear(d, d)

        self.sp = None      # a SeqParallel (set by GPT.set_seq_parallel), not a submodule

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        if self.sp is not None:
            # Ulysses: q, k, v of the local tokens [B, T/sp, heads, hd] go through DeepSpeed's
            # DistributedAttention (all-to-all to [B, T, heads/sp, hd], _local, all-to-all back)
            q, k, v = (t.reshape(B, T, self.heads, hd) for t in self.qkv(x).split(C, dim=2))
            y = self.sp.attention(self._local)(q, k, v, 0)                   # batch_dim_idx 0: [B, T/sp, heads, hd]
            return self.proj(y.reshape(B, T, C))
        q, k, v = (t.reshape(B, T, self.heads, hd).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)     # True above the diagonal
        att = _op(lambda q, k: (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)), q, k)
        att = _op(lambda a: F.softmax(a.masked_fill(mask, float("-inf")), dim=-1), att)
        y = _op(lambda a, v: a @ v, att, v)                                    # [B, heads, T, hd]
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def _local(self, q, k, v):
        """The attention DistributedAttention wraps: q, k, v [B, T, h, hd] of h local heads over the
        whole sequence, the same ops as forward()'s; returns [B, T, h, hd]."""
        T, hd = q.shape[1], q.shape[3]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = _op(lambda q, k: (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)), q, k)
        att = _op(lambda a: F.softmax(a.masked_fill(mask, float("-inf")), dim=-1), att)
        return _op(lambda a, v: a @ v, att, v).transpose(1, 2)


class MLPBlock(nn.Module):
    def __init__(self, d, width):
        super().__init__()
        self.fc = Linear(d, width)
        self.proj = Linear(width, d)

    def forward(self, x):
        return self.proj(_op(lambda u: F.gelu(u, approximate="tanh"), self.fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, width):
        super().__init__()
        self.ln1 = LayerNorm(d, eps=LN_EPS)
        self.attn = Attention(d, heads)
        self.ln2 = LayerNorm(d, eps=LN_EPS)
        self.mlp = MLPBlock(d, width)

    def forward(self, x, action=None, keep_prob=1.0):
        """Without progressive layer drop (action None) the plain block. With it, as DeepSpeedExamples'
        bing_bert PLD layer (modelingpreln_layerdrop.py BertLayer.forward) runs it: action 0 is the
        identity; action 1 divides both residual branches by keep_prob (its `output * 1 / keep_prob`)."""
        if action is None:
            x = _op(torch.add, x, self.attn(self.ln1(x)))
            return _op(torch.add, x, self.mlp(self.ln2(x)))
        if action == 0:
            return x
        x = _op(torch.add, x, _op(lambda u: u * 1 / keep_prob, self.attn(self.ln1(x))))
        return _op(torch.add, x, _op(lambda u: u * 1 / keep_prob, self.mlp(self.ln2(x))))


class GPT(nn.Module):
    """Input: int64 tokens [B, T+1]; inputs tokens[:, :-1], targets tokens[:, 1:]."""

    def __init__(self, vocab, context, d, heads, layers, width, tied):
        super().__init__()
        self.vocab, self.tied = vocab, tied
        self.sp = None
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([Block(d, heads, width) for _ in range(layers)])
        self.ln_f = LayerNorm(d, eps=LN_EPS)
        if not tied:
            self.lm_head = Linear(d, vocab, bias=False)

    def forward(self, tokens, curriculum_seqlen=None, progressive_layer_drop=False, pld_theta=None):
        idx, targets = tokens[:, :-1], tokens[:, 1:]
        if curriculum_seqlen is not None:
            # DeepSpeed's legacy seqlen curriculum: the engine passes the length, and the model keeps the
            # first curriculum_seqlen positions of inputs and labels (as Megatron-DeepSpeed's GPT does)
            idx, targets = idx[:, :curriculum_seqlen], targets[:, :curriculum_seqlen]
        lo = 0
        if self.sp is not None:
            # Ulysses: this rank's tokens lo … lo+T/sp−1 of every sample, at their global positions
            # (Megatron-DeepSpeed's get_batch slices tokens, labels and position_ids so)
            Tl = idx.shape[1] // self.sp.size
            lo = self.sp.rank * Tl
            idx, targets = idx[:, lo:lo + Tl], targets[:, lo:lo + Tl]
        pos = torch.arange(lo, lo + idx.shape[1], device=idx.device)
        x = _op(lambda a, b: a + b[None], self.wte(idx), self.wpe(pos))
        if progressive_layer_drop:
            # the engine passes pld_theta; the draws are DeepSpeedExamples' BertEncoder.forward, from numpy's
            # global generator (rank_train.py seeds it alike on every rank)
            drop_prob = 1 - pld_theta
            step = drop_prob / len(self.blocks)
            p = 1.0
            for blk in self.blocks:
                action = np.random.choice([1, 0], p=[p, 1 - p])
                p = p - step
                x = blk(x, action, p)
        else:
            for blk in self.blocks:
                x = blk(x)
        h = self.ln_f(x)
        logits = _op(F.linear, h, self.wte.weight) if self.tied else self.lm_head(h)
        # the loss is always computed on fp32 logits (a no-op cast for fp32 runs)
        if self.sp is not None:
            tok = F.cross_entropy(logits.float().reshape(-1, self.vocab), targets.reshape(-1), reduction="none")
            whole = self.sp.gather_losses(tok.reshape(targets.shape))         # [sp, B, T/sp]
            return whole.sum() / whole.numel()
        return F.cross_entropy(logits.float().reshape(-1, self.vocab), targets.reshape(-1))

    def set_seq_parallel(self, sp):
        """Runs the model as one rank of a Ulysses group (a SeqParallel; None: whole sequences)."""
        self.sp = sp
        for blk in self.blocks:
            blk.attn.sp = sp


# ----------------------------------------------------------------------------- Ulysses
class _GatherSequence(torch.autograd.Function):
    """Forward: the SP group's per-token losses [sp, ...] (an all_gather). Backward: the rank's own
    slice of the gradient. This is the loss of DeepSpeed's vocab_sequence_parallel_cross_entropy
    (deepspeed/sequence/cross_entropy.py, new in v0.15.0 with the HF integration, #5774; the same
    as Megatron-DeepSpeed's): every rank gets the loss over the whole sequence and
    differentiates its own tokens' share of it."""

    @staticmethod
    def forward(ctx, x, group, rank, size):
        ctx.rank = rank
        parts = [torch.empty_like(x) for _ in range(size)]
        torch.distributed.all_gather(parts, x.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, g):
        return g[ctx.rank], None, None, None


class SeqParallel:
    """One rank's Ulysses group: its torch process group, rank in it and size. attention() wraps a
    local attention in DeepSpeed's own deepspeed.sequence.layer.DistributedAttention (scatter the
    heads, gather the sequence: scatter_idx 2, gather_idx 1, batch_dim_idx 0)."""

    def __init__(self, group, rank, size):
        self.group, self.rank, self.size = group, rank, size
        self._attn = {}

    def attention(self, local, key=None):
        """DistributedAttention around local, one per attention module (key, or local's module);
        a new local function of the same key replaces the wrapped one."""
        from deepspeed.sequence.layer import DistributedAttention
        k = id(key if key is not None else local.__self__)
        if k not in self._attn:
            self._attn[k] = DistributedAttention(local, self.group, scatter_idx=2, gather_idx=1)
        self._attn[k].local_attn = local
        return self._attn[k]

    def gather_losses(self, tok):
        return _GatherSequence.apply(tok, self.group, self.rank, self.size)


# ----------------------------------------------------------------------------- MLP
class MLP(nn.Module):
    """Input: (x [B, in], y [B, out]); ReLU between the layers, MSE loss in fp32."""

    def __init__(self, sizes):
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", Linear(sizes[i], sizes[i + 1]))
        self.n = len(sizes) - 1

    def forward(self, batch):
        x, y = batch
        h = x.to(self.fc1.weight.dtype)
        for i in range(1, self.n + 1):
            h = getattr(self, f"fc{i}")(h)
            if i < self.n:
                h = _op(F.relu, h)
        return F.mse_loss(h.float(), y.float())


# ----------------------------------------------------------------------------- Llama family
_LLAMA_REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model", "llama", "testdata", "reference")


def build_llama(config):
    """model/llama's reference LlamaForCausalLM of a config.json dict, whose forward takes int64
    tokens [B, T+1] as the GPT's and returns the mean cross-entropy of tokens[:, 1:]. The head is
    called as a module (not F.linear on its weight), so ZeRO-3's hooks gather it."""
    import sys
    if _LLAMA_REF not in sys.path:
        sys.path.insert(0, _LLAMA_REF)
    import llama_ref

    class LlamaCase(llama_ref.ForCausalLM):
        sp = None   # a SeqParallel (set_seq_parallel), not a submodule

        def forward(self, tokens):
            idx, targets = tokens[:, :-1], tokens[:, 1:]
            B, T = idx.shape
            position_ids = torch.arange(T)[None].expand(B, T)
            whole = position_ids
            if self.sp is not None:
                # Ulysses: this rank's tokens lo … lo+T/sp−1, RoPE at their global positions
                Tl = T // self.sp.size
                lo = self.sp.rank * Tl
                idx, targets = idx[:, lo:lo + Tl], targets[:, lo:lo + Tl]
                position_ids = torch.arange(lo, lo + Tl)[None].expand(B, Tl)
            h = self.model.embed_tokens(idx)
            cos, sin = llama_ref.rotary(self.cfg, position_ids, h.dtype)
            for layer in self.model.layers:
                if self.sp is None:
                    h = layer(h, cos, sin, position_ids)
                    continue
                # DecoderLayer.forward with the attention through DistributedAttention
                h = h + _llama_sp_attention(llama_ref, layer.self_attn, layer.input_layernorm(h), cos, sin, whole, self.sp)
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            h = self.model.norm(h)
            if self.cfg.tie_word_embeddings:
                raise SystemExit("llama: tied embeddings are not built here (ZeRO-3 would not gather the head)")
            if self.sp is not None:
                V = self.cfg.vocab_size
                tok = F.cross_entropy(self.lm_head(h).float().reshape(-1, V), targets.reshape(-1), reduction="none")
                whole_loss = self.sp.gather_losses(tok.reshape(targets.shape))   # [sp, B, T/sp]
                return whole_loss.sum() / whole_loss.numel()
            return llama_ref.loss(self.lm_head(h), targets)

        def set_seq_parallel(self, sp):
            """Runs the model as one rank of a Ulysses group (a SeqParallel; None: whole sequences)."""
            self.sp = sp

    return LlamaCase(llama_ref.Cfg(config))


def _llama_sp_attention(ref, attn, x, cos, sin, whole_positions, sp):
    """llama_ref.Attention.forward for the rank's T/sp tokens x [B, T/sp, H] under Ulysses: q, k, v
    projected (and q/k-normed, RoPE'd at the tokens' global positions) locally, as [B, T/sp, heads,
    D], then DeepSpeed's DistributedAttention (scatter_idx 2, gather_idx 1, batch_dim_idx 0) scatters
    the q heads and the kv heads over the group (4 q and 2 kv heads over sp 2: q heads 2s, 2s+1 with
    kv head s, GQA's own grouping) and gathers the sequence for the same causal attention as
    forward()'s; o_proj on the local tokens."""
    B, Tl, _ = x.shape
    D = attn.cfg.head_dim
    q = attn.q_proj(x).view(B, Tl, -1, D)
    k = attn.k_proj(x).view(B, Tl, -1, D)
    if attn.cfg.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    v = attn.v_proj(x).view(B, Tl, -1, D)
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    q = (q * c) + (ref.rotate_half(q) * s)
    k = (k * c) + (ref.rotate_half(k) * s)

    def local(q, k, v):                          # [B, T, h, D], [B, T, h_kv, D] → [B, T, h, D]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        rep = q.shape[1] // k.shape[1]
        k, v = ref.repeat_kv(k, rep), ref.repeat_kv(v, rep)
        w = torch.matmul(q, k.transpose(2, 3)) * attn.scaling
        ok = ref.allowed_mask(whole_positions, attn.window)
        w = w + torch.where(ok, 0.0, torch.finfo(w.dtype).min).to(w.dtype)
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v).transpose(1, 2)

    o = sp.attention(local, key=attn)(q, k, v, 0)
    return attn.o_proj(o.reshape(B, Tl, -1))


# ----------------------------------------------------------------------------- description
_BLOCK = re.compile(r"^blocks\.(\d+)\.")
_FC = re.compile(r"^fc(\d+)\.weight$")


def arch_of(desc):
    names = [p["name"] for p in desc["params"]]
    if desc.get("arch"):
        return desc["arch"]
    if "wte.weight" in names and "wpe.weight" in names:
        return "gpt"
    if names and re.match(r"^fc\d+\.(weight|bias)$", names[0]):
        return "mlp"
    if "model.embed_tokens.weight" in names:
        return "llama"
    raise SystemExit(f"models.json: unknown architecture (first parameter {names[:1]})")


def build_model(desc):
    """The module a models.json entry describes; checks names, shapes and order against it."""
    shape = {p["name"]: p["shape"] for p in desc["params"]}
    arch = arch_of(desc)
    if arch == "gpt":
        for key, want in (("activation", "gelu_tanh"), ("loss", "cross_entropy")):
            if desc.get(key, want) != want:
                raise SystemExit(f"gpt: {key} {desc[key]!r} is not built here (only {want})")
        vocab, d = shape["wte.weight"]
        layers = 1 + max(int(m.group(1)) for m in map(_BLOCK.match, shape) if m)
        heads = desc.get("heads") or max(1, d // HEAD_SIZE)
        model = GPT(vocab, shape["wpe.weight"][0], d, heads, layers, shape["blocks.0.mlp.fc.weight"][0],
                    tied="lm_head.weight" not in shape)
    elif arch == "mlp":
        for key, want in (("activation", "relu"), ("loss", "mse")):
            if desc.get(key, want) != want:
                raise SystemExit(f"mlp: {key} {desc[key]!r} is not built here (only {want})")
        ws = [shape[f"fc{i}.weight"] for i in sorted(int(m.group(1)) for m in map(_FC.match, shape) if m)]
        model = MLP([ws[0][1]] + [w[0] for w in ws])
    elif arch == "llama":
        if desc.get("loss", "cross_entropy") != "cross_entropy":
            raise SystemExit(f"llama: loss {desc['loss']!r} is not built here (only cross_entropy)")
        model = build_llama(desc["llama_config"])
    else:
        raise SystemExit(f"architecture {arch!r} is not built here")
    got = [(n, list(p.shape)) for n, p in model.named_parameters()]
    want = [(p["name"], list(p["shape"])) for p in desc["params"]]
    if got != want:
        raise SystemExit(f"the {arch} built from models.json does not match it:\n built {got}\n want  {want}")
    return model


def read_models(init_dir):
    with open(os.path.join(init_dir, "models.json")) as f:
        return json.load(f)


def init_file(init_dir, name):
    """models.json names files relative to the init directory's parent ("init/gpt_init.safetensors")."""
    return os.path.join(init_dir, os.path.basename(name))


class Data:
    """The samples of a *_data.safetensors in order (leading dims [step, sample] flattened).

    Step s, micro-step m, rank r reads micro-batch mb = m*world + r: samples
    s*G + mb*B ... s*G + mb*B + B-1 (mod the number of samples), G = B*GAS*world. With
    sequence parallelism rank and world are the data-parallel ones (rank // sp, world / sp):
    the sp ranks of a group read the same samples, and the GPT keeps the rank's tokens."""

    def __init__(self, path, arch):
        t, _ = load_safetensors(path)
        self.arch = arch
        if arch in ("gpt", "llama"):
            tok = t["tokens"]
            self.tensors = [tok.reshape(-1, tok.shape[-1])]
        else:
            self.tensors = [t[k].reshape(-1, t[k].shape[-1]) for k in ("x", "y")]
        self.n = self.tensors[0].shape[0]

    def micro_batch(self, step, micro, rank, B, gas, world):
        first = step * B * gas * world + (micro * world + rank) * B
        idx = torch.arange(first, first + B) % self.n
        if first + B <= self.n:                     # the common case: a plain slice (no copy)
            idx = slice(first, first + B)
        parts = [t[idx] for t in self.tensors]
        return parts[0] if self.arch in ("gpt", "llama") else tuple(parts)
