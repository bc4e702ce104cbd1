#!/usr/bin/python3
"""Plain PyTorch fp32 training of a Llama-family model, the baseline of llama.sh.

  /usr/bin/python3 scripts/bench/llama_torch.py CONFIG.json [--seq 128] [--micro 1] [--steps 4] [--threads 2]

Builds model/llama's plain-PyTorch LlamaForCausalLM (model/llama/testdata/reference/llama_ref.py,
the parity tests' twin of transformers) from a config.json, initializes it as HF's _init_weights,
and trains --steps steps of torch.optim.AdamW in float32 on uniform random token ids: forward,
cross-entropy, backward, step, zero_grad, one micro-batch of --micro × --seq tokens per step, one
process. Prints one JSON line: the tokens/s of each step and their mean over the steps after the
first (the warm-up), as llama.sh reads dszero's --json-log.
"""
import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model", "llama", "testdata", "reference"))
import torch  # noqa: E402
import llama_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.config) as f:
        cfg = llama_ref.Cfg(json.load(f))
    g = torch.Generator().manual_seed(1234)
    model = llama_ref.ForCausalLM(cfg)
    model.init_weights(g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    per = []
    for step in range(a.steps):
        tok = torch.randint(0, cfg.vocab_size, (a.micro, a.seq + 1), generator=g)
        t0 = time.perf_counter()
        loss = llama_ref.loss(model.logits(tok[:, :-1]), tok[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        per.append(a.micro * a.seq / (time.perf_counter() - t0))
    steady = per[1:] or per
    print(json.dumps({"params": sum(p.numel() for p in model.parameters()), "loss": loss.item(),
                      "tokens_per_s": per, "mean_after_first": sum(steady) / len(steady),
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
