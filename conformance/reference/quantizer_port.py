"""DeepSpeed 0.14.5's quantizer op (op_builder/quantizer.py, csrc/quantization/*.cu), ported to torch
on the CPU for ZeRO++'s qwZ and qgZ.

DeepSpeed's CUDAQuantizer (partition_parameters.py) and all_to_all_quant_reduce
(coalesced_collectives.py) load the op with QuantizerBuilder().load(); its kernels are CUDA only,
and the CPU accelerator has no such builder. install() puts PortBuilder in its place, and
DeepSpeed's own ZeRO-3 code — which groups, which ranks quantize what, the all-gathers and
all_to_all_singles, the narrowing, the sums — runs unmodified around it.

What is DeepSpeed's and what is the port: everything outside this file is DeepSpeed's. This file
re-implements, op by op, the five functions ZeRO++ calls, from the kernels' source:

  quantize(x, groups, bits, Symmetric)     quantize.cu + quantization_utils.h Params<Symmetric>
  dequantize(q, scales, groups, bits, Symmetric)     dequantize.cu + dequantization_utils.h (fp16 out)
  swizzle_quant(x, groups, bits, Symmetric, 1, nodes, devices)     swizzled_quantize.cu
  quantized_reduction(q, scales, in_groups, out_groups, bits, Symmetric, devices)   quant_reduce.cu

The arithmetic is the kernels': the input is read as fp16 (pt_binding.cpp casts data_ptr to
__half*: a tensor of another dtype is refused here, where the kernel would misread it); a
group's max |x| is exact; scale = f32(2^bits) / f32(2·max) (1 when max is 0); a level is
clamp(__float2int_rn(f32(x)·scale)) (round half to even: torch.round); the stored scale is
f32(1/scale); a dequantized value is __float2half_rn(f32(level)·stored). int4 values are packed
two to a byte as PackedInt4 {high:4, low:4} = {v[2i+1], v[2i]} lays them out with GCC/NVCC's
bit-field order: element 2i in bits 4-7, element 2i+1 in bits 0-3. quantized_reduction adds the
devices' dequantized fp16 values in fp16 (__hadd2), device 0 first, before requantizing.
Asymmetric quantization, which ZeRO++ does not use, is not ported. Thread-block layouts do not
change the values: every reduction is a max (exact) or the fp16 sum in device order.
"""
import torch

Symmetric = 0
Asymmetric = 1


def _fp16(x, who):
    if x.dtype != torch.float16:
        raise TypeError(f"quantizer_port.{who}: a {x.dtype} tensor; DeepSpeed's kernel reads fp16 "
                        "(pt_binding.cpp casts data_ptr to __half*)")
    return x.reshape(-1).float()


def _check(bits, qtype):
    if qtype != Symmetric or bits not in (4, 8):
        raise NotImplementedError(f"quantizer_port: {bits}-bit type {qtype} (ZeRO++ uses Symmetric 4/8)")


def _quantize_groups(x32, groups, bits):
    """(levels int32 (n,), stored scales float32 (groups, 1)) of the flat float32 values."""
    g = x32.reshape(groups, -1)
    m = g.abs().amax(dim=1, keepdim=True)
    scale = torch.where(m == 0, torch.ones_like(m), torch.full_like(m, float(1 << bits)) / (2 * m))
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    levels = torch.clamp(torch.round(g * scale), lo, hi).to(torch.int32).reshape(-1)
    return levels, (1 / scale)


def _pack(levels, bits):
    if bits == 8:
        return levels.to(torch.int8)
    pairs = levels.reshape(-1, 2)
    packed = ((pairs[:, 0] & 0xF) << 4) | (pairs[:, 1] & 0xF)
    return packed.to(torch.uint8).view(torch.int8)


def _unpack(q, bits):
    """int32 levels of packed bytes."""
    q = q.reshape(-1)
    if bits == 8:
        return q.to(torch.int32)
    b = q.view(torch.uint8).to(torch.int32)
    hi, lo = b >> 4, b & 0xF
    v = torch.stack([hi, lo], dim=1).reshape(-1)
    return torch.where(v >= 8, v - 16, v)


def _dequantize_flat(levels, scales, groups):
    n = levels.numel()
    per = n // groups
    idx = torch.arange(n) // per
    if per == 0 or int(idx[-1]) >= scales.numel():
        raise RuntimeError(f"quantizer_port.dequantize: {n} values in groups of {n}//{groups} = {per} read "
                           f"scale {int(idx[-1]) if per else '?'} of {scales.numel()}: DeepSpeed's kernel would "
                           "read memory it never wrote")
    return (levels.float() * scales.reshape(-1)[idx]).half()


def quantize(x, groups, bits, qtype):
    _check(bits, qtype)
    x32 = _fp16(x, "quantize")
    levels, stored = _quantize_groups(x32, groups, bits)
    shape = list(x.shape)
    shape[-1] //= 8 // bits
    return [_pack(levels, bits).reshape(shape), stored]


def dequantize(q, scales, groups, bits, qtype):
    _check(bits, qtype)
    shape = list(q.shape)
    shape[-1] *= 8 // bits
    return _dequantize_flat(_unpack(q, bits), scales, groups).reshape(shape)


def swizzle_quant(x, groups, bits, qtype, pipeline, nodes, devices):
    _check(bits, qtype)
    if pipeline != 1:
        raise NotImplementedError("quantizer_port.swizzle_quant: pipelining (ZeRO++ passes 1)")
    x32 = _fp16(x, "swizzle_quant")
    parts = nodes * devices
    levels, stored = _quantize_groups(x32, groups, bits)
    # partition p = k·devices + d goes to position d·nodes + k (swizzled_quant_kernel's output_partition)
    out_l, out_s = torch.empty_like(levels), torch.empty_like(stored)
    plen, pg = levels.numel() // parts, groups // parts
    for p in range(parts):
        o = (p % devices) * nodes + p // devices
        out_l[o * plen:(o + 1) * plen] = levels[p * plen:(p + 1) * plen]
        out_s[o * pg:(o + 1) * pg] = stored[p * pg:(p + 1) * pg]
    return [_pack(out_l, bits), out_s]


def quantized_reduction(q, scales, in_groups, out_groups, bits, qtype, devices):
    _check(bits, qtype)
    levels = _unpack(q, bits)
    n = levels.numel() // devices
    gin = in_groups // devices
    acc = torch.zeros(n, dtype=torch.float16)
    for j in range(devices):
        part = _dequantize_flat(levels[j * n:(j + 1) * n], scales.reshape(-1)[j * gin:(j + 1) * gin], gin)
        acc = (acc.float() + part.float()).half()   # __hadd2: the float32 sum of two fp16 values, rounded
    out_levels, stored = _quantize_groups(acc.float(), out_groups, bits)
    shape = list(q.shape)
    shape[-1] //= devices
    return [_pack(out_levels, bits).reshape(shape), stored]


class _Module:
    Symmetric = Symmetric
    Asymmetric = Asymmetric
    quantize = staticmethod(quantize)
    dequantize = staticmethod(dequantize)
    swizzle_quant = staticmethod(swizzle_quant)
    quantized_reduction = staticmethod(quantized_reduction)


class PortBuilder:
    """Stands in for QuantizerBuilder: load() returns the port."""
    NAME = "quantizer"

    def load(self, verbose=True):
        return _Module


def install():
    import deepspeed.ops.op_builder as ob
    ob.QuantizerBuilder = PortBuilder
