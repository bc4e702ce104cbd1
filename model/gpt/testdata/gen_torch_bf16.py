"""Writes torch 1.13's bf16 CPU results for the Go bf16 emulation tests.

torch_bf16_kernels.safetensors: inputs and outputs of the bf16 kernels that
package gpt reproduces bit for bit (bf16.go): LayerNorm forward/backward for
several widths, GELU (tanh) forward/backward, a Linear layer forward/backward
(oneDNN's bf16 GEMM order), and the float32 exp and log (Sleef) that the
softmax and the loss use. All bf16 tensors are stored as BF16.

torch_bf16_grads_step1_m0r0.safetensors: the TinyGPT in bf16 (model.bfloat16()
of gpt_init.safetensors), step 1, micro-batch 0 of rank 0, the gradient of
backward(loss.float() / 2): one bf16 .grad per parameter, as DeepSpeed's
BF16_Optimizer sees it after the first micro-step.

Regenerate (Debian 12, python3-torch 1.13.1, one thread, on a CPU with
AVX512-BF16, where torch runs bf16 matmuls through oneDNN; its own kernels
use AVX2):
  cd model/gpt/testdata
  PYTHONPATH=/work/shared/reference/harness OMP_NUM_THREADS=1 /usr/bin/python3 gen_torch_bf16.py
"""
import os

import torch
import torch.nn.functional as F

import common as C

INIT = "/work/shared/reference/deepspeed-0.14.5-cpu/init"
bf = torch.bfloat16


def kernels():
    g = torch.Generator().manual_seed(20240601)
    out = {}
    for width in (64, 40, 100, 768):
        rows = 4 if width == 768 else 16
        x = (torch.randn(rows, width, generator=g) * 2 + 0.5).to(bf).requires_grad_()
        w = (1 + 0.3 * torch.randn(width, generator=g)).to(bf).requires_grad_()
        b = (0.3 * torch.randn(width, generator=g)).to(bf).requires_grad_()
        dy = (torch.randn(rows, width, generator=g) * 0.01).to(bf)
        y, mean, rstd = torch.native_layer_norm(x, (width,), w, b, 1e-5)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
        p = f"ln{width}."
        out.update({p + "x": x.detach(), p + "w": w.detach(), p + "b": b.detach(), p + "dy": dy,
                    p + "y": y.detach(), p + "mean": mean.reshape(-1), p + "rstd": rstd.reshape(-1),
                    p + "dx": dx, p + "dw": dw, p + "db": db})
    u = (torch.randn(4096, generator=g) * 3).to(bf).requires_grad_()
    du = torch.randn(4096, generator=g).to(bf)
    gu = F.gelu(u, approximate="tanh")
    out.update({"gelu.x": u.detach(), "gelu.y": gu.detach(), "gelu.dy": du,
                "gelu.dx": torch.autograd.grad(gu, u, du)[0]})
    n, ic, oc = 32, 256, 32
    a = (torch.randn(n, ic, generator=g) * 2.0 ** torch.randint(-6, 6, (n, ic), generator=g)).to(bf).requires_grad_()
    wt = (torch.randn(oc, ic, generator=g) * 0.05).to(bf).requires_grad_()
    bias = (torch.randn(oc, generator=g) * 0.1).to(bf).requires_grad_()
    dout = (torch.randn(n, oc, generator=g) * 0.01).to(bf)
    o = F.linear(a, wt, bias)
    da, dwt, _ = torch.autograd.grad(o, (a, wt, bias), dout)
    out.update({"linear.x": a.detach(), "linear.w": wt.detach(), "linear.b": bias.detach(), "linear.y": o.detach(),
                "linear.dy": dout, "linear.dx": da, "linear.dw": dwt})
    e = torch.cat([torch.randn(2000, generator=g) * 5, -torch.rand(48, generator=g) * 110])
    out.update({"exp.x": e, "exp.y": torch.exp(e)})
    lg = torch.cat([torch.rand(1500, generator=g) * 64 + 0.5, torch.rand(548, generator=g) * 1e-3])
    out.update({"log.x": lg, "log.y": torch.log(lg)})
    return {k: v.contiguous() for k, v in out.items()}


def grads():
    model = C.build_model("gpt")
    w, _ = C.load_safetensors(os.path.join(INIT, "gpt_init.safetensors"))
    model.load_state_dict(w)
    model = model.bfloat16()
    data, _ = C.load_safetensors(os.path.join(INIT, "gpt_data.safetensors"))
    loss = model(C.micro_batch(data, "gpt", 0, 0, 0))
    (loss.float() / 2).backward()
    return {n: p.grad for n, p in model.named_parameters()}, float(loss)


def main():
    torch.set_num_threads(1)
    C.save_safetensors("torch_bf16_kernels.safetensors", kernels(), {"torch_version": torch.__version__})
    g, loss = grads()
    C.save_safetensors("torch_bf16_grads_step1_m0r0.safetensors", g,
                       {"torch_version": torch.__version__, "loss": repr(loss),
                        "what": "bf16 TinyGPT, step 1, micro 0, rank 0: .grad of backward(loss.float() / 2)"})


if __name__ == "__main__":
    main()
