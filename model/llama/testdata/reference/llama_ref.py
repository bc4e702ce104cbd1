"""A plain-PyTorch LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM /
MistralForCausalLM, written from the transformers sources for the Go parity
tests of package model/llama. It runs on Debian's python3-torch 1.13 on the
CPU and needs nothing else (no transformers, no safetensors package).

What each piece follows (huggingface/transformers, src/transformers/):

  models/llama/modeling_llama.py     LlamaRMSNorm, LlamaRotaryEmbedding,
                                     rotate_half, apply_rotary_pos_emb,
                                     repeat_kv, eager_attention_forward,
                                     LlamaAttention, LlamaMLP,
                                     LlamaDecoderLayer, LlamaModel,
                                     LlamaForCausalLM
  models/llama/configuration_llama.py  defaults, attention_bias (q,k,v,o),
                                     mlp_bias, head_dim
  models/qwen2/modular_qwen2.py,     q/k/v bias and none on o; use_sliding_window,
  models/qwen2/configuration_qwen2.py  max_window_layers, layer_types
  models/qwen3/modular_qwen3.py,     q_norm/k_norm (RMSNorm over head_dim,
  models/qwen3/configuration_qwen3.py  before RoPE), head_dim default 128
  models/mistral/configuration_mistral.py  sliding_window on every layer
  modeling_rope_utils.py             inv_freq for default, linear, dynamic,
                                     yarn (v5: original_max_position_embeddings,
                                     truncate, mscale), llama3
  masking_utils.py                   causal, sliding_window_overlay
                                     (kv_idx > q_idx - window), packed
                                     sequences from position_ids
                                     (find_packed_sequence_indices)
  loss/loss_utils.py                 ForCausalLMLoss: fp32 logits,
                                     ignore_index -100, mean or
                                     sum / num_items_in_batch
  modeling_utils.py _init_weights    normal(0, initializer_range) for Linear
                                     and Embedding (padding row zeroed),
                                     zero biases, RMSNorm weights one

The targets passed to loss() are already shifted (labels[t] = input[t+1]),
as dszero's data loader builds them (HF's shift_labels).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

# Per-family defaults of the configuration classes, for keys a config.json
# leaves out.
DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048, rms_norm_eps=1e-6,
                  rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.02),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.02),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.02, head_dim=128),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                    initializer_range=0.02, sliding_window=4096),
}


class Cfg:
    """The fields of a config.json the model reads, with the family's defaults."""

    def __init__(self, d):
        self.raw = dict(d)
        mt = d["model_type"]
        self.model_type = mt
        g = lambda k: d[k] if k in d else DEFAULTS[mt].get(k)
        self.vocab_size = g("vocab_size")
        self.hidden_size = g("hidden_size")
        self.intermediate_size = g("intermediate_size")
        self.num_hidden_layers = g("num_hidden_layers")
        self.num_attention_heads = g("num_attention_heads")
        kv = d.get("num_key_value_heads", DEFAULTS[mt].get("num_key_value_heads"))
        self.num_key_value_heads = kv if kv is not None else self.num_attention_heads
        hd = d.get("head_dim", DEFAULTS[mt].get("head_dim"))
        self.head_dim = hd if hd is not None else self.hidden_size // self.num_attention_heads
        self.max_position_embeddings = g("max_position_embeddings")
        self.rms_norm_eps = g("rms_norm_eps")
        self.tie_word_embeddings = g("tie_word_embeddings")
        self.initializer_range = g("initializer_range")
        self.pad_token_id = d.get("pad_token_id")
        # Biases.
        if mt == "qwen2":
            self.qkv_bias, self.o_bias, self.mlp_bias = True, False, False
        elif mt == "mistral":
            self.qkv_bias = self.o_bias = self.mlp_bias = False
        else:
            ab = bool(d.get("attention_bias", False))
            self.qkv_bias = self.o_bias = ab
            self.mlp_bias = bool(d.get("mlp_bias", False)) if mt == "llama" else False
        self.qk_norm = mt == "qwen3"
        # Sliding windows, per layer.
        L = self.num_hidden_layers
        if mt == "mistral":
            w = d.get("sliding_window", 4096)
            self.windows = [w] * L
        elif mt in ("qwen2", "qwen3"):
            w = d.get("sliding_window", 4096) if d.get("use_sliding_window", False) else None
            types = d.get("layer_types")
            if types is None:
                mwl = d.get("max_window_layers", 28)
                types = ["sliding_attention" if w is not None and i >= mwl else "full_attention" for i in range(L)]
            self.windows = [w if t == "sliding_attention" else None for t in types]
        else:
            self.windows = [None] * L
        self.rope = rope_parameters(d, DEFAULTS[mt]["rope_theta"])


def rope_parameters(d, default_theta):
    """The RoPE parameters of a config: transformers 5's rope_parameters, or
    rope_theta plus rope_scaling (with the legacy 'type' key)."""
    if d.get("rope_parameters") is not None:
        rp = dict(d["rope_parameters"])
        rp.setdefault("rope_theta", d.get("rope_theta", default_theta))
    else:
        rp = dict(d.get("rope_scaling") or {})
        rp["rope_theta"] = d.get("rope_theta", default_theta)
    rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
    rp.pop("type", None)
    return rp


def inv_freq_and_scaling(cfg):
    """inv_freq (float32, head_dim/2) and the attention scaling of cos/sin,
    as modeling_rope_utils computes them at init (seq_len None)."""
    rp = cfg.rope
    base = rp["rope_theta"]
    dim = cfg.head_dim  # partial_rotary_factor is 1 for these families
    t = rp["rope_type"]

    def default():
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

    if t == "default":
        return default(), 1.0
    if t == "linear":
        return default() / rp["factor"], 1.0
    if t == "dynamic":
        factor = rp["factor"]
        seq_len = cfg.max_position_embeddings
        b = base * ((factor * seq_len / cfg.max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (b ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0
    if t == "llama3":
        inv_freq = default()
        factor = rp["factor"]
        low_freq_factor = rp["low_freq_factor"]
        high_freq_factor = rp["high_freq_factor"]
        old_context_len = rp["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama), 1.0
    if t == "yarn":
        factor = rp["factor"]
        attention_factor = rp.get("attention_factor")
        mscale = rp.get("mscale")
        mscale_all_dim = rp.get("mscale_all_dim")
        if "original_max_position_embeddings" in rp:
            original = rp["original_max_position_embeddings"]
            factor = cfg.max_position_embeddings / original
        else:
            original = cfg.max_position_embeddings

        def get_mscale(scale, m=1):
            if scale <= 1:
                return 1.0
            return 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = rp.get("beta_fast") or 32
        beta_slow = rp.get("beta_slow") or 1

        def correction_dim(rot):
            return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if rp.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extra = 1.0 / pos_freqs
        inter = 1.0 / (factor * pos_freqs)
        ef = 1 - ramp
        return inter * (1 - ef) + extra * ef, attention_factor
    raise ValueError(f"rope_type {t}")


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


def rotary(cfg, position_ids, dtype):
    inv_freq, scaling = inv_freq_and_scaling(cfg)
    inv = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    pos = position_ids[:, None, :].float()
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n):
    b, h, t, d = x.shape
    if n == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n, t, d).reshape(b, h * n, t, d)


def allowed_mask(position_ids, window):
    """(B, 1, T, T) bool: query i sees key j. Causal, block-diagonal over
    packed sequences (a new one starts where position_ids does not step by
    one), and within the sliding window when one is set."""
    B, T = position_ids.shape
    first = position_ids[:, :1] - 1
    diff = torch.diff(position_ids, prepend=first, dim=-1)
    seq = (diff != 1).cumsum(-1)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    ok = (j <= i)[None] & (seq[:, :, None] == seq[:, None, :])
    if window is not None:
        ok = ok & (j > i - window)[None]
    return ok[:, None]


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg = cfg
        H, D = cfg.hidden_size, cfg.head_dim
        nH, nKV = cfg.num_attention_heads, cfg.num_key_value_heads
        self.q_proj = nn.Linear(H, nH * D, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(H, nKV * D, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(H, nKV * D, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(nH * D, H, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.window = cfg.windows[layer]
        self.scaling = D ** -0.5

    def forward(self, x, cos, sin, position_ids):
        B, T, _ = x.shape
        D = self.cfg.head_dim
        shape = (B, T, -1, D)
        q = self.q_proj(x).view(shape)
        k = self.k_proj(x).view(shape)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        q = (q * c) + (rotate_half(q) * s)
        k = (k * c) + (rotate_half(k) * s)
        rep = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        w = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        ok = allowed_mask(position_ids, self.window)
        w = w + torch.where(ok, 0.0, torch.finfo(w.dtype).min).to(w.dtype)
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, I, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(H, I, bias=b)
        self.up_proj = nn.Linear(H, I, bias=b)
        self.down_proj = nn.Linear(I, H, bias=b)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos, sin, position_ids):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, position_ids)
        return h + self.mlp(self.post_attention_layernorm(h))


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, cfg.pad_token_id)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class ForCausalLM(nn.Module):
    """named_parameters() gives HF's names and order: model.embed_tokens.weight,
    model.layers.N...., model.norm.weight, lm_head.weight (absent when tied)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def head_weight(self):
        if self.cfg.tie_word_embeddings:
            return self.model.embed_tokens.weight
        return self.lm_head.weight

    def logits(self, tokens, position_ids=None):
        B, T = tokens.shape
        if position_ids is None:
            position_ids = torch.arange(T)[None].expand(B, T)
        h = self.model.embed_tokens(tokens)
        cos, sin = rotary(self.cfg, position_ids, h.dtype)
        for layer in self.model.layers:
            h = layer(h, cos, sin, position_ids)
        h = self.model.norm(h)
        return F.linear(h, self.head_weight())

    def init_weights(self, gen):
        """_init_weights: Linear and Embedding N(0, initializer_range), the
        embedding's padding row zero, biases zero, RMSNorm weights one."""
        std = self.cfg.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, std, generator=gen)
            if self.cfg.pad_token_id is not None:
                self.model.embed_tokens.weight[self.cfg.pad_token_id].zero_()


def loss(logits, targets, num_items=None):
    """ForCausalLMLoss on already-shifted targets."""
    V = logits.shape[-1]
    logits = logits.float().reshape(-1, V)
    targets = targets.reshape(-1)
    if num_items is None:
        return F.cross_entropy(logits, targets, ignore_index=-100, reduction="mean")
    return F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum") / num_items
