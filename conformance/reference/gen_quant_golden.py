#!/usr/bin/python3
"""Golden values of DeepSpeed's quantizer op as quantizer_port.py computes it, for zero/quant's Go
tests (TestPortGolden), which must agree bit for bit: two implementations of the same kernels,
written apart from DeepSpeed's CUDA source.

  PYTHONPATH=$HOME/.cache/dszero-ref/deepspeed-src:conformance/reference:conformance/reference/shims \
      DS_ACCELERATOR=cpu /usr/bin/python3 conformance/reference/gen_quant_golden.py zero/quant/testdata/port_golden.json

The qwZ group counts are DeepSpeed's own: CUDAQuantizer.quantize (partition_parameters.py) runs
with the port installed as its QuantizerBuilder.
"""
import json
import sys

import torch

import quantizer_port as qp


def bits16(t):
    return t.reshape(-1).contiguous().view(torch.int16).to(torch.int32).bitwise_and(0xFFFF).tolist()


def bits32(t):
    return t.reshape(-1).contiguous().float().view(torch.int32).tolist()


def i8(t):
    return t.reshape(-1).to(torch.int32).tolist()


def fp16_input(gen, n, scale):
    x = (torch.randn(n, generator=gen, dtype=torch.float32) * scale).half()
    x[n // 3] = 0          # a zero, and a run of equal magnitudes
    x[n // 2:n // 2 + 4] = x[n // 2]
    return x


def main(out):
    qp.install()
    from deepspeed.runtime.zero.partition_parameters import CUDAQuantizer
    gen = torch.Generator().manual_seed(2024)
    cases = {"weights": [], "swizzle": [], "reduction": []}
    cq = CUDAQuantizer()
    # ties: a group of max 1 has scale 2^bits/2, so (2k+1)/2^bits lands halfway between two levels
    ties8 = torch.tensor([1.0] + [(2 * k + 1) / 256 * (-1) ** k for k in range(15)]).half()
    ties4 = torch.tensor(([1.0] + [(2 * k + 1) / 16 * (-1) ** k for k in range(7)]) * 4).half()
    for n in (16, 8, 1000, 8008, 16384):
        x = ties8 if n == 16 else fp16_input(gen, n, 0.05)
        q, s = cq.quantize(x)                       # DeepSpeed's group rule, the port's kernel
        d = cq.dequantize(q, s)
        cases["weights"].append({"n": n, "groups": s.numel(), "x": bits16(x), "q": i8(q), "scales": bits32(s),
                                 "dequantized": bits16(d)})
    for n, groups, nodes, devices in ((32, 4, 2, 1), (512, 64, 2, 1), (768, 96, 3, 1), (768, 96, 2, 2), (2048, 64, 2, 2)):
        x = ties4 if n == 32 else fp16_input(gen, n, 0.01)
        q, s = qp.swizzle_quant(x.reshape(-1, 8), groups, 4, qp.Symmetric, 1, nodes, devices)
        cases["swizzle"].append({"n": n, "groups": groups, "nodes": nodes, "devices": devices, "x": bits16(x),
                                 "q": i8(q), "scales": bits32(s)})
        # what device d of a node reduces: each device's chunk d, as the all_to_all within the node delivers it
        chunk, sg = q.numel() // devices, groups // devices
        recv_q = torch.cat([q[d * chunk:(d + 1) * chunk] for d in range(devices)] * 1)
        recv_s = torch.cat([s.reshape(-1)[d * sg:(d + 1) * sg] for d in range(devices)])
        rq, rs = qp.quantized_reduction(recv_q, recv_s, groups, groups // devices, 4, qp.Symmetric, devices)
        dq = qp.dequantize(rq, rs, rs.numel(), 4, qp.Symmetric)
        cases["reduction"].append({"in_groups": groups, "out_groups": groups // devices, "devices": devices,
                                   "q_in": i8(recv_q), "scales_in": bits32(recv_s), "q": i8(rq),
                                   "scales": bits32(rs), "dequantized": bits16(dq)})
    with open(out, "w") as f:
        json.dump({"generator": "conformance/reference/gen_quant_golden.py (quantizer_port.py, DeepSpeed 0.14.5's "
                                "CUDAQuantizer group rule)", "torch": torch.__version__, **cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
