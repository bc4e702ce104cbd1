#!/usr/bin/python3
"""Makes the init/ of new cases: a model's initial weights, its data, and its models.json entry.

  /usr/bin/python3 conformance/reference/gen_init.py --out ROOT/init --key gpt2l --arch gpt \
      [--vocab 64 --context 32 --dim 64 --heads 4 --layers 2 --mlp-width 256 --tied --seq 32]
  /usr/bin/python3 conformance/reference/gen_init.py --out ROOT/init --key mlp4 --arch mlp --sizes 16,64,64,8
  /usr/bin/python3 conformance/reference/gen_init.py --out ROOT/init --key llama --arch llama \
      --llama-config config.json [--seq 32]

Writes <key>_init.safetensors (one fp32 tensor per parameter, in named_parameters() order),
<key>_data.safetensors (leading dims [--steps, --per-step]: "tokens" int64 [.., seq+1] for the GPT,
"x"/"y" f32 for the MLP) and adds or replaces the entry <key> of models.json. The defaults are the
harness's TinyGPT/TinyMLP with its seeds and recipes (README.md, "Models"), so
`--key gpt --arch gpt` and `--key mlp --arch mlp` give the shipped init tensors bit for bit.

Init (torch.Generator seeded --init-seed, parameters visited in order):
  GPT: LayerNorm weights 1, biases 0, attn.proj/mlp.proj weights N(0, 0.02/sqrt(2*layers)),
       every other weight N(0, 0.02).   MLP: weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  Llama: HF's _init_weights (llama_ref.init_weights): Linear and Embedding N(0, initializer_range),
       biases 0, RMSNorm weights 1. The data is the GPT's recipe with the config's vocab_size.
Data (generator seeded --data-seed, default 4321 for a GPT, 4322 for an MLP):
  GPT: arithmetic token sequences (start + stride*t) mod vocab, stride 1..7, 10% random tokens.
  MLP: x ~ N(0,1), y = sin(2 x A) + 0.05 noise, A ~ N(0,1)/sqrt(in).
"""
import argparse
import hashlib
import json
import math
import os
import sys

sys.dont_write_bytecode = True    # no __pycache__ in the source tree
import envsetup

torch = models = None      # imported in main(), once envsetup.apply() has pinned the OpenBLAS kernels


def init_weights(model, arch, layers, seed):
    g = torch.Generator().manual_seed(seed)
    if arch == "llama":
        model.init_weights(g)
        return
    with torch.no_grad():
        for name, p in model.named_parameters():
            if arch == "gpt":
                if name.endswith(("ln1.weight", "ln2.weight")) or name == "ln_f.weight":
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                elif name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                    p.copy_(torch.randn(p.shape, generator=g) * (0.02 / math.sqrt(2 * layers)))
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            else:
                layer = getattr(model, name.split(".")[0])
                bound = 1.0 / math.sqrt(layer.in_features)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)


def make_data(a, steps, per_step, seed):
    g = torch.Generator().manual_seed(seed)
    n = steps * per_step
    if a.arch in ("gpt", "llama"):
        seq = a.seq or a.context
        start = torch.randint(0, a.vocab, (n, 1), generator=g)
        stride = torch.randint(1, 8, (n, 1), generator=g)
        toks = (start + stride * torch.arange(seq + 1)[None]) % a.vocab
        noise = torch.rand(n, seq + 1, generator=g) < 0.1
        rnd = torch.randint(0, a.vocab, (n, seq + 1), generator=g)
        toks = torch.where(noise, rnd, toks)
        return {"tokens": toks.reshape(steps, per_step, seq + 1).to(torch.int64)}
    sizes = [int(s) for s in a.sizes.split(",")]
    x = torch.randn(n, sizes[0], generator=g)
    A = torch.randn(sizes[0], sizes[-1], generator=g) / math.sqrt(sizes[0])
    y = torch.sin(2.0 * (x @ A)) + 0.05 * torch.randn(n, sizes[-1], generator=g)
    return {"x": x.reshape(steps, per_step, sizes[0]).float(), "y": y.reshape(steps, per_step, sizes[-1]).float()}


def description(a):
    """The models.json entry (parameters filled in below), enough for models.build_model."""
    if a.arch == "gpt":
        d, params = a.dim, [("wte.weight", [a.vocab, a.dim]), ("wpe.weight", [a.context, a.dim])]
        for i in range(a.layers):
            b = f"blocks.{i}."
            params += [(b + "ln1.weight", [d]), (b + "ln1.bias", [d]),
                       (b + "attn.qkv.weight", [3 * d, d]), (b + "attn.qkv.bias", [3 * d]),
                       (b + "attn.proj.weight", [d, d]), (b + "attn.proj.bias", [d]),
                       (b + "ln2.weight", [d]), (b + "ln2.bias", [d]),
                       (b + "mlp.fc.weight", [a.mlp_width, d]), (b + "mlp.fc.bias", [a.mlp_width]),
                       (b + "mlp.proj.weight", [d, a.mlp_width]), (b + "mlp.proj.bias", [d])]
        params += [("ln_f.weight", [d]), ("ln_f.bias", [d])] + ([] if a.tied else [("lm_head.weight", [a.vocab, d])])
        extra = {"arch": "gpt", "heads": a.heads, "activation": "gelu_tanh", "loss": "cross_entropy"}
    elif a.arch == "llama":
        # the parameters are the module's own (build_model's check is then trivially met)
        params = [(n, list(p.shape)) for n, p in models.build_llama(a.llama_config).named_parameters()]
        extra = {"arch": "llama", "llama_config": a.llama_config, "loss": "cross_entropy"}
    else:
        sizes = [int(s) for s in a.sizes.split(",")]
        params = []
        for i in range(len(sizes) - 1):
            params += [(f"fc{i + 1}.weight", [sizes[i + 1], sizes[i]]), (f"fc{i + 1}.bias", [sizes[i + 1]])]
        extra = {"arch": "mlp", "activation": "relu", "loss": "mse"}
    return {"params": [{"name": n, "shape": s} for n, s in params], **extra}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the init directory (models.json is updated in place)")
    ap.add_argument("--key", required=True, help="the model's key in models.json (file names <key>_*.safetensors)")
    ap.add_argument("--arch", required=True, choices=["gpt", "mlp", "llama"])
    ap.add_argument("--llama-config", default=None, help="llama: a Hugging Face config.json (model_type llama, qwen2, qwen3, mistral)")
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--seq", type=int, default=0, help="tokens per sample minus one (default: --context)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--mlp-width", type=int, default=256)
    ap.add_argument("--tied", action="store_true", help="no lm_head: the output reuses wte.weight")
    ap.add_argument("--sizes", default="16,64,64,8", help="MLP layer widths, input to output")
    ap.add_argument("--steps", type=int, default=10, help="leading data dim (steps)")
    ap.add_argument("--per-step", type=int, default=16, help="second data dim (samples per step)")
    ap.add_argument("--init-seed", type=int, default=1234)
    ap.add_argument("--data-seed", type=int, default=None)
    ap.add_argument("--openblas-core", default=None, help="as gen_case.py's (the MLP's targets use a matmul)")
    a = ap.parse_args()
    envsetup.apply(a.openblas_core)
    global torch, models
    import torch            # noqa: E402
    import models           # noqa: E402

    if a.arch == "llama":
        if not a.llama_config:
            ap.error("--arch llama needs --llama-config config.json")
        with open(a.llama_config) as f:
            a.llama_config = json.load(f)
        a.vocab, a.context = a.llama_config["vocab_size"], a.llama_config["max_position_embeddings"]
    desc = description(a)
    model = models.build_model(desc)           # also checks the description against the module
    init_weights(model, a.arch, a.layers, a.init_seed)
    sd = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = make_data(a, a.steps, a.per_step, a.data_seed if a.data_seed is not None
                     else 4321 + (0 if a.arch != "mlp" else 1))
    os.makedirs(a.out, exist_ok=True)
    p_init = os.path.join(a.out, f"{a.key}_init.safetensors")
    p_data = os.path.join(a.out, f"{a.key}_data.safetensors")
    models.save_safetensors(p_init, sd, {"param_order": list(sd), "model": a.key})
    models.save_safetensors(p_data, data, {"layout": "[step, sample, ...]; step s, micro-step m, rank r reads "
                                           "samples s*G + (m*world + r)*B ... + B-1 (mod the samples), G = B*GAS*world"})
    for p in desc["params"]:
        p["numel"] = math.prod(p["shape"])
    desc.update(total_params=sum(p["numel"] for p in desc["params"]),
                init_file=f"init/{a.key}_init.safetensors", data_file=f"init/{a.key}_data.safetensors",
                data_shapes={k: list(v.shape) for k, v in data.items()},
                init_sha256=hashlib.sha256(open(p_init, "rb").read()).hexdigest(),
                data_sha256=hashlib.sha256(open(p_data, "rb").read()).hexdigest())
    mj = os.path.join(a.out, "models.json")
    all_models = models.read_models(a.out) if os.path.exists(mj) else {}
    all_models[a.key] = desc
    with open(mj, "w") as f:
        json.dump(all_models, f, indent=1)
        f.write("\n")
    print(f"{a.key}: {a.arch}, {desc['total_params']} parameters, data {desc['data_shapes']} -> {a.out}")


if __name__ == "__main__":
    main()
