"""Loads a checkpoint directory (one dszero wrote, say) into the reference
model and checks it against a parity case: every parameter present with
its shape and nothing unknown, and the step-1 loss of the case's batch
equal to the case's golden loss.

  /usr/bin/python3 model/llama/testdata/reference/check_dir.py OUT_DIR model/llama/testdata/llama3

The weights must be those of the case (a load -> save of its directory);
with 16-bit weights give a tolerance: --tol 1e-2.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as R  # noqa: E402
import st  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("case")
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(a.dir, "config.json")) as f:
        cfg = R.Cfg(json.load(f))
    model = R.ForCausalLM(cfg)
    state = st.load_checkpoint(a.dir)
    names = dict(model.named_parameters())
    extra = set(state) - set(names)
    if cfg.tie_word_embeddings:
        extra.discard("lm_head.weight")
    assert not extra, f"unknown tensors {sorted(extra)}"
    with torch.no_grad():
        for n, p in names.items():
            assert n in state, f"missing {n}"
            assert tuple(state[n].shape) == tuple(p.shape), f"{n}: {tuple(state[n].shape)} != {tuple(p.shape)}"
            p.copy_(state[n].float())
    data, _ = st.load(os.path.join(a.case, "golden.safetensors"))
    with open(os.path.join(a.case, "golden.json")) as f:
        g = json.load(f)
    pos = data["positions"][0] if g["positions_given"] else None
    loss = R.loss(model.logits(data["tokens"][0], pos), data["targets"][0], g["loss_denom"][0]).item()
    rel = abs(loss - g["losses"][0]) / abs(g["losses"][0])
    print(f"{a.dir}: {len(names)} tensors; step-1 loss {loss:.9g}, golden {g['losses'][0]:.9g} (rel {rel:.2e})")
    sys.exit(0 if rel <= a.tol else 1)


if __name__ == "__main__":
    main()
