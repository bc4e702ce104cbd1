"""Writes PyTorch's gradients for the Go parity tests.

For the harness model KIND (gpt or mlp) with its initial weights, rank 0 of
optimizer step 1 accumulates backward(loss / 2) over its two micro-batches
(micro 0 and 1, samples [0,4) and [8,12)), exactly as plain_train.py does
before the all-reduce. The accumulated .grad of every parameter is written,
fp32, in named_parameters order.

Regenerate (Debian 12, python3-torch 1.13.1, OpenBLAS 0.3.21 pthread, one thread):
  cd model/gpt/testdata
  PYTHONPATH=/work/shared/reference/harness /usr/bin/python3 gen_torch_grads.py gpt torch_grads_step1_rank0.safetensors
  PYTHONPATH=/work/shared/reference/harness /usr/bin/python3 gen_torch_grads.py mlp ../../mlp/testdata/torch_grads_step1_rank0.safetensors
"""
import os
import sys

import torch

import common as C

INIT = "/work/shared/reference/deepspeed-0.14.5-cpu/init"


def main(kind, out):
    torch.set_num_threads(1)
    model = C.build_model(kind)
    weights, _ = C.load_safetensors(os.path.join(INIT, f"{kind}_init.safetensors"))
    model.load_state_dict(weights)
    data, _ = C.load_safetensors(os.path.join(INIT, f"{kind}_data.safetensors"))
    losses = []
    for micro in (0, 1):
        batch = C.micro_batch(data, kind, 0, micro, 0)
        loss = model(batch)
        (loss / C.GAS).backward()
        losses.append(loss.item())
    grads = {name: p.grad for name, p in model.named_parameters()}
    C.save_safetensors(out, grads, {"torch_version": torch.__version__, "micro_losses": losses,
                                    "what": "rank 0, step 1: sum over micro 0,1 of grad(loss/2)"})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
