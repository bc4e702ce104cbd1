"""Writes the checkpoints and goldens of model/llama's parity tests.

For each case below it writes, under model/llama/testdata/<case>/:

  config.json            the case's HF config (the keys transformers reads)
  model.safetensors      the initial weights in HF names (or sharded:
  (or shards + index)    model-0000K-of-0000N.safetensors + model.safetensors.index.json)
  golden.safetensors     tokens, targets, positions (I64 [steps, B, T]); the
                         step-1 logits (F32 [B, T, V]); grad/<name>: every
                         parameter's gradient after step 1's backward;
                         final/<name>: the weights after the last step (some cases)
  golden.json            per-step losses and the run's settings

Each step is one forward, loss (mean over non-ignored targets, or
sum / loss_denom), backward, and a plain SGD update p -= lr * grad. The
model is llama_ref.py, float32, one thread.

Regenerate (Debian 12, python3-torch 1.13, from the repository root):

  /usr/bin/python3 model/llama/testdata/reference/gen_goldens.py model/llama/testdata
"""
import copy
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as R  # noqa: E402
import st  # noqa: E402

B, T, STEPS, LR = 2, 16, 3, 0.2

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)

CASES = {
    # Llama-3: GQA, llama3 RoPE, sharded checkpoint with an old
    # rotary_emb.inv_freq buffer, untied, eos_token_id a list.
    "llama3": dict(
        config=dict(architectures=["LlamaForCausalLM"], model_type="llama", **SMALL,
                    max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                    rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_max_position_embeddings=128, rope_type="llama3"),
                    tie_word_embeddings=False, initializer_range=0.2, attention_bias=False,
                    mlp_bias=False, hidden_act="silu", bos_token_id=1, eos_token_id=[2, 3],
                    torch_dtype="float32"),
        dtype=torch.float32, shard=16384, inv_freq_buffer=True, final=True, tokenizer=True),
    # Qwen2: q/k/v bias, tied (the checkpoint carries lm_head.weight anyway),
    # a padding token whose embedding row gets no gradient.
    "qwen2": dict(
        config=dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", **SMALL,
                    max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                    tie_word_embeddings=True, use_sliding_window=False, sliding_window=4096,
                    max_window_layers=2, initializer_range=0.2, hidden_act="silu",
                    bos_token_id=1, eos_token_id=2, pad_token_id=5, torch_dtype="float32"),
        dtype=torch.float32, carry_lm_head=True, final=True, pad_tokens=True),
    # Qwen3: q/k norm, head_dim 16 != hidden/heads 8, tied, BF16 on disk,
    # transformers 5's rope_parameters and dtype keys.
    "qwen3": dict(
        config=dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", **SMALL, head_dim=16,
                    max_position_embeddings=128, rms_norm_eps=1e-6,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                    tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                    initializer_range=0.2, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                    dtype="bfloat16"),
        dtype=torch.bfloat16, final=True),
    # Mistral: a sliding window of 5 < T, one key/value head (MQA), F16 on disk.
    "mistral": dict(
        config=dict(architectures=["MistralForCausalLM"], model_type="mistral",
                    **{**SMALL, "num_key_value_heads": 1}, max_position_embeddings=256,
                    rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5,
                    tie_word_embeddings=False, initializer_range=0.2, hidden_act="silu",
                    bos_token_id=1, eos_token_id=2, torch_dtype="float16"),
        dtype=torch.float16),
    # Packing: position restarts (a block may start at a position other than
    # 0), ignore-index targets, sum / loss_denom on step 2; Llama's
    # attention_bias (q, k, v and o) and mlp_bias.
    "packed": dict(
        config=dict(architectures=["LlamaForCausalLM"], model_type="llama", **SMALL,
                    max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
                    tie_word_embeddings=False, initializer_range=0.2, attention_bias=True,
                    mlp_bias=True, hidden_act="silu", torch_dtype="float32"),
        dtype=torch.float32, packed=True, loss_denom=[None, 37.0, None], final=True),
    # YaRN on Qwen2 with use_sliding_window: layer 1 (>= max_window_layers)
    # attends within 6 tokens; positions 40..55.
    "yarn": dict(
        config=dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", **SMALL,
                    max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
                    rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=32),
                    tie_word_embeddings=False, use_sliding_window=True, sliding_window=6,
                    max_window_layers=1, initializer_range=0.2, hidden_act="silu",
                    torch_dtype="float32"),
        dtype=torch.float32, offset=40, steps=2),
    # Linear RoPE scaling (legacy "type" key), positions 100..115.
    "linear": dict(
        config=dict(architectures=["LlamaForCausalLM"], model_type="llama", **SMALL,
                    max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
                    rope_scaling=dict(type="linear", factor=2.0), tie_word_embeddings=True,
                    initializer_range=0.2, hidden_act="silu", torch_dtype="float32"),
        dtype=torch.float32, offset=100, steps=2),
}

# RoPE configurations whose inv_freq and attention scaling rope.json holds.
ROPE_BASE = dict(model_type="llama", hidden_size=64, num_attention_heads=2, max_position_embeddings=4096,
                 vocab_size=8, intermediate_size=8, num_hidden_layers=1)
ROPE_CASES = {
    "default": dict(rope_theta=500000.0),
    "linear": dict(rope_theta=10000.0, rope_scaling=dict(type="linear", factor=4.0)),
    "dynamic": dict(rope_theta=10000.0, rope_scaling=dict(rope_type="dynamic", factor=2.0)),
    "llama3": dict(rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                                          high_freq_factor=4.0,
                                                          original_max_position_embeddings=512)),
    "yarn": dict(rope_theta=10000.0, rope_scaling=dict(type="yarn", factor=8.0)),
    "yarn_original": dict(rope_theta=1000000.0, rope_scaling=dict(rope_type="yarn", factor=8.0,
                                                                   original_max_position_embeddings=1024)),
    "yarn_betas_attention": dict(rope_theta=10000.0, rope_scaling=dict(rope_type="yarn", factor=8.0, beta_fast=16.0,
                                                                        beta_slow=2.0, attention_factor=0.75)),
    "yarn_mscale_untruncated": dict(rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=16.0,
                                                         mscale=0.707, mscale_all_dim=1.0, truncate=False)),
    "v5_default": dict(rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "head_dim": dict(rope_theta=10000.0, head_dim=48),
}


def tiny_tokenizer_files(dir):
    """Small stand-ins for the tokenizer files an HF directory carries, so the
    Go tests can check that a save copies them through byte for byte."""
    with open(os.path.join(dir, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                   "added_tokens": []}, f, indent=2)
    with open(os.path.join(dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 256}, f, indent=2)
    with open(os.path.join(dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f, indent=2)
    with open(os.path.join(dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": True, "temperature": 0.6,
                   "top_p": 0.9, "transformers_version": "4.45.0"}, f, indent=2)


def batch(gen, V, spec, step):
    """tokens, targets, positions (each [B, T] int64) and whether the
    positions are given explicitly."""
    seq = torch.randint(0, V, (B, T + 1), generator=gen)
    if spec.get("pad_tokens"):
        pad = spec["config"]["pad_token_id"]
        seq[0, 3] = pad
        seq[1, 7:10] = pad
    tokens, targets = seq[:, :T].clone(), seq[:, 1:].clone()
    positions = torch.arange(T)[None].expand(B, T).clone()
    given = False
    if spec.get("packed"):
        # Row 0: samples of 7, 5 and 4 tokens; row 1: 10 and 6, the second
        # block starting at position 3 (a continued document).
        rows = [[7, 5, 4], [10, 6]]
        starts = [[0, 0, 0], [0, 3]]
        for b, (lens, st0) in enumerate(zip(rows, starts)):
            t0 = 0
            for n, s in zip(lens, st0):
                positions[b, t0:t0 + n] = torch.arange(s, s + n)
                targets[b, t0 + n - 1] = -100  # no target across a boundary
                t0 += n
        targets[0, 0:3] = -100  # a prompt
        targets[1, 10:12] = -100
        if step == 1:
            targets[1, :] = -100  # a row with no target at all
        given = True
    if spec.get("offset"):
        positions = positions + spec["offset"]
        given = True
    return tokens, targets, positions, given


def run_case(out_root, name, spec):
    dir = os.path.join(out_root, name)
    os.makedirs(dir, exist_ok=True)
    for f in os.listdir(dir):
        os.remove(os.path.join(dir, f))
    cfgd = spec["config"]
    with open(os.path.join(dir, "config.json"), "w") as f:
        json.dump(cfgd, f, indent=2)
        f.write("\n")
    cfg = R.Cfg(copy.deepcopy(cfgd))
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    model = R.ForCausalLM(cfg)
    model.init_weights(gen)
    with torch.no_grad():
        # Move RMSNorm weights off 1 and biases off 0 so that every gradient
        # path carries signal.
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith(".bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        if cfg.pad_token_id is not None:
            model.model.embed_tokens.weight[cfg.pad_token_id].zero_()

    # The checkpoint on disk, then the model loaded back from its values.
    state = {}
    for pname, p in model.named_parameters():
        state[pname] = p.detach().to(spec["dtype"]).clone()
        if spec.get("inv_freq_buffer") and pname == "model.layers.0.self_attn.o_proj.weight":
            state["model.layers.0.self_attn.rotary_emb.inv_freq"] = R.inv_freq_and_scaling(cfg)[0].clone()
    if spec.get("carry_lm_head"):
        state["lm_head.weight"] = model.model.embed_tokens.weight.detach().to(spec["dtype"]).clone()
    st.save_checkpoint(dir, state, spec.get("shard"))
    if spec.get("tokenizer"):
        tiny_tokenizer_files(dir)
    loaded = st.load_checkpoint(dir)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(loaded[pname].float())

    steps = spec.get("steps", STEPS)
    denoms = spec.get("loss_denom", [None] * steps)
    data_gen = torch.Generator().manual_seed(1000 + sum(map(ord, name)))
    toks, tgts, poss, losses = [], [], [], []
    golden = {}
    given = False
    for s in range(steps):
        tokens, targets, positions, given = batch(data_gen, cfg.vocab_size, spec, s)
        toks.append(tokens)
        tgts.append(targets)
        poss.append(positions)
        logits = model.logits(tokens, positions)
        l = R.loss(logits, targets, denoms[s])
        model.zero_grad(set_to_none=True)
        l.backward()
        losses.append(l.item())
        if s == 0:
            golden["logits"] = logits.detach().clone()
            for pname, p in model.named_parameters():
                golden["grad/" + pname] = p.grad.detach().clone()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(LR * p.grad)
    if spec.get("final"):
        for pname, p in model.named_parameters():
            golden["final/" + pname] = p.detach().clone()
    data = {"tokens": torch.stack(toks), "targets": torch.stack(tgts), "positions": torch.stack(poss)}
    st.save(os.path.join(dir, "golden.safetensors"), {**data, **golden}, {"torch_version": torch.__version__})
    inv, scaling = R.inv_freq_and_scaling(cfg)
    meta = {"losses": losses, "lr": LR, "steps": steps, "B": B, "T": T, "loss_denom": denoms,
            "positions_given": given, "final": bool(spec.get("final")),
            "inv_freq": inv.tolist(), "attention_scaling": scaling,
            "torch_version": torch.__version__}
    with open(os.path.join(dir, "golden.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{name}: losses {['%.6f' % x for x in losses]}")


def rope_goldens(out_root):
    out = {}
    for name, extra in ROPE_CASES.items():
        d = {**ROPE_BASE, **extra}
        cfg = R.Cfg(copy.deepcopy(d))
        inv, scaling = R.inv_freq_and_scaling(cfg)
        out[name] = {"config": d, "inv_freq": inv.tolist(), "attention_scaling": scaling}
    with open(os.path.join(out_root, "rope.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


def main(out_root):
    torch.set_num_threads(1)
    for name, spec in CASES.items():
        run_case(out_root, name, spec)
    rope_goldens(out_root)


if __name__ == "__main__":
    main(sys.argv[1])
