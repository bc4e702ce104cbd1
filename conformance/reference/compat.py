"""Run-time patches that let DeepSpeed v0.14.5 train on a CPU with Debian's torch 1.13.1.

Every patch replaces attributes of already-imported DeepSpeed classes or modules in the rank's
own process; no DeepSpeed file is modified. rank_train.py installs what a config needs and
records the names (PATCH_NOTES) in result.json's "harness_patches".

gloo         ZeRO >= 1 and bf16. torch 1.13's ProcessGroupGloo lacks _allgather_base,
             _reduce_scatter_base and reduce_scatter ("RuntimeError: no support for
             _allgather_base in Gloo process group"), and rejects bfloat16 tensors ("Invalid scalar
             type", first in DeepSpeedEngine._broadcast_model). We re-implement the tensor
             collectives of deepspeed.comm's TorchBackend with gloo all_gather/all_reduce; bf16
             moves as raw bytes (bit-exact) or is reduced in fp32 and rounded back once.
cxx17        DeepSpeed's C++ FusedAdam/CPUAdam (configs without "torch_adam"). The CPU op builder
             passes no -std flag, torch 1.13's JIT uses -std=c++14 and csrc/includes/simd.h needs
             C++17 ("'is_same_v' is not a member of 'std'"): append -std=c++17.
cpu_fp16     fp16 configs. The CPU accelerator answers is_fp16_supported() == False, so
             DeepSpeed stops with "Type fp16 is not supported."; the fp16 machinery itself is
             device-independent. The model must then avoid CPU half kernels (models.py emulates).
aio          NVMe offload. The CPU accelerator maps AsyncIOBuilder to NotImplementedBuilder; the
             generic op_builder.async_io builder compiles with g++ and libaio-dev.
aio_pinned   NVMe offload. O_DIRECT needs page-aligned buffers but CPU pin_memory() returns the
             tensor as is (the swap file stays empty, then an assertion aborts the swap-in), and
             is_pinned() is always False (aio wait() with no pending op aborts): "pinned" is made
             to mean page-aligned.
onebit_nccl  1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb with comm_backend_name "nccl"):
             NcclBackend imports cupy; onebit_backend.py is its compressed_allreduce on gloo.
sdpa_stub    flops_profiler. DeepSpeed's profiler wraps F.scaled_dot_product_attention, which
             torch 1.13 lacks ("module 'torch.nn.functional' has no attribute
             'scaled_dot_product_attention'"): a stub that raises if called is put there first
             (models.py never calls it, so the count is unchanged).
nvme_ckpt    NVMe offload + save_checkpoint: every rank copies its swap folder to the same
             <tag>/offloaded_tensors and the second dies with FileExistsError; we emulate the
             upstream fix (e37c37acd, PR #7613): offloaded_tensors/rank<NN>.
"""
import importlib
import os
import shutil

import torch
import torch.distributed as td

PATCH_NOTES = {
    "gloo": "gloo_compat (tensor all-gather/reduce-scatter emulation for torch<2 gloo)",
    "cxx17": "op_compat -> op_builder.cpu.builder,deepspeed.ops.op_builder.cpu.builder (-std=c++17 for JIT CPU ops)",
    "cpu_fp16": "op_compat.install_cpu_fp16 (CPU accelerator is_fp16_supported -> True); model computes fp16 ops in fp32",
    "aio": "op_compat.install_aio (generic AsyncIOBuilder instead of the CPU accelerator's NotImplementedBuilder)",
    "aio_pinned": "op_compat.install_aligned_pin_memory (O_DIRECT needs page-aligned buffers)",
    "nvme_ckpt": "op_compat.install_nvme_ckpt_fix (per-rank offloaded_tensors/rankNN dir, as upstream e37c37acd)",
    "sdpa_stub": "op_compat.install_sdpa_stub (F.scaled_dot_product_attention stub for DeepSpeed's flops profiler on torch<2)",
    "onebit_nccl": "onebit_backend.install (NcclBackend.compressed_allreduce ported to gloo: cupy needs CUDA)",
    "quantizer": "quantizer_port.install (QuantizerBuilder's CUDA kernels, quantize/dequantize/swizzle_quant/quantized_reduction, ported to torch: ZeRO++ qwZ/qgZ)",
}


# ----------------------------------------------------------------------------- gloo
class _Done:
    """Work handle of an emulated collective (they all complete synchronously)."""

    def wait(self, *a, **k):
        return True

    def is_completed(self):
        return True

    def synchronize(self):
        return None


def _as_bytes(t):
    """A bf16 tensor as a flat uint8 view of the same memory (gloo moves uint8, not bf16)."""
    if t.dtype != torch.bfloat16:
        return t
    assert t.is_contiguous(), "compat: non-contiguous bf16 tensor in a collective"
    return t.reshape(-1).view(torch.uint8)


def _done(async_op):
    return _Done() if async_op else None


_orig = {}     # TorchBackend's own methods (the emulations keep their signatures: DeepSpeed passes keywords)


def _all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
    src = _as_bytes(input_tensor.contiguous()).reshape(-1)
    td.all_gather(list(_as_bytes(output_tensor).reshape(-1).split(src.numel())), src, group=group)
    return _done(async_op)


def _reduce_scatter_tensor(self, output_tensor, input_tensor, op=td.ReduceOp.SUM, group=None, async_op=False):
    # all-reduce the whole tensor, keep this rank's slice
    full = input_tensor.contiguous().view(-1)
    full = full.float() if full.dtype == torch.bfloat16 else full.clone()
    td.all_reduce(full, op=self._reduce_op(op), group=group)
    output_tensor.view(-1).copy_(full.split(output_tensor.numel())[td.get_rank(group)])
    return _done(async_op)


def _reduce_scatter(self, output, input_list, op=td.ReduceOp.SUM, group=None, async_op=False):
    full = torch.cat([t.contiguous().view(-1) for t in input_list])
    full = full.float() if full.dtype == torch.bfloat16 else full
    td.all_reduce(full, op=self._reduce_op(op), group=group)
    output.view(-1).copy_(full.split([t.numel() for t in input_list])[td.get_rank(group)])
    return _done(async_op)


def _all_reduce(self, tensor, op=td.ReduceOp.SUM, group=None, async_op=False):
    if tensor.dtype != torch.bfloat16:
        return _orig["all_reduce"](self, tensor, op=op, group=group, async_op=async_op)
    acc = tensor.float()
    td.all_reduce(acc, op=self._reduce_op(op), group=group)
    tensor.copy_(acc)
    return _done(async_op)


def _reduce(self, tensor, dst, op=td.ReduceOp.SUM, group=None, async_op=False):
    if tensor.dtype != torch.bfloat16:
        return _orig["reduce"](self, tensor, dst, op=op, group=group, async_op=async_op)
    acc = tensor.float()
    td.reduce(acc, dst, op=self._reduce_op(op), group=group)
    if td.get_rank() == dst:
        tensor.copy_(acc)
    return _done(async_op)


def _broadcast(self, tensor, src, group=None, async_op=False):
    return _orig["broadcast"](self, _as_bytes(tensor), src, group=group, async_op=async_op)


def _all_gather(self, tensor_list, tensor, group=None, async_op=False):
    return _orig["all_gather"](self, [_as_bytes(o) for o in tensor_list], _as_bytes(tensor), group=group,
                               async_op=async_op)


def _all_reduce_coalesced(self, tensors, op=td.ReduceOp.SUM, group=None, async_op=False):
    if all(t.dtype != torch.bfloat16 for t in tensors):
        return _orig["all_reduce_coalesced"](self, tensors, op=op, group=group, async_op=async_op)
    for t in tensors:
        _all_reduce(self, t, op=op, group=group)
    return _done(async_op)


def _all_gather_coalesced(self, output_tensors, input_tensors, group=None, async_op=False):
    for o, i in zip(output_tensors, input_tensors):
        _all_gather_into_tensor(self, o, i, group=group)
    return _done(async_op)


def gloo_needed():
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return (major, minor) < (2, 0)


def install_gloo():
    tb = importlib.import_module("deepspeed.comm.torch").TorchBackend
    for name in ("all_reduce", "reduce", "broadcast", "all_gather", "all_reduce_coalesced"):
        _orig.setdefault(name, getattr(tb, name))
    tb.all_reduce, tb.reduce, tb.broadcast = _all_reduce, _reduce, _broadcast
    tb.all_gather, tb.all_reduce_coalesced = _all_gather, _all_reduce_coalesced
    tb.all_gather_into_tensor = tb.all_gather_base = _all_gather_into_tensor
    tb.reduce_scatter_tensor, tb.reduce_scatter = _reduce_scatter_tensor, _reduce_scatter
    tb.all_gather_coalesced = _all_gather_coalesced
    tb.has_all_gather_into_tensor = lambda self: True
    tb.has_reduce_scatter_tensor = lambda self: True


# ----------------------------------------------------------------------------- C++ ops
def install_cxx17():
    for modname in ("op_builder.cpu.builder", "deepspeed.ops.op_builder.cpu.builder"):
        try:
            cls = importlib.import_module(modname).CPUOpBuilder
        except ImportError:
            continue
        if getattr(cls, "_dszero_cxx17", False):
            continue
        orig = cls.cxx_args
        cls.cxx_args = lambda self, _orig=orig: list(_orig(self)) + ["-std=c++17"]   # the last -std wins
        cls._dszero_cxx17 = True


def _cpu_accelerator_class():
    for modname in ("deepspeed.accelerator.cpu_accelerator", "accelerator.cpu_accelerator"):
        try:
            return importlib.import_module(modname).CPU_Accelerator
        except ImportError:
            continue
    raise ImportError("DeepSpeed's CPU accelerator")


def install_cpu_fp16():
    cls = _cpu_accelerator_class()
    cls.is_fp16_supported = lambda self: True
    cls.supported_dtypes = lambda self: [torch.float, torch.bfloat16, torch.float16]


# ----------------------------------------------------------------------------- NVMe offload
def install_aio():
    generic = importlib.import_module("op_builder.async_io").AsyncIOBuilder
    for modname in ("deepspeed.runtime.swap_tensor.partitioned_optimizer_swapper",
                    "deepspeed.runtime.swap_tensor.partitioned_param_swapper",
                    "deepspeed.runtime.swap_tensor.pipelined_optimizer_swapper",
                    "deepspeed.ops.aio"):
        importlib.import_module(modname).AsyncIOBuilder = generic


def install_aligned_pin_memory(align=4096):
    cls = _cpu_accelerator_class()

    def pin_memory(self, t, align_bytes=1):
        n = t.numel() * t.element_size()
        if n == 0 or t.data_ptr() % align == 0:
            return t
        raw = torch.empty(n + align, dtype=torch.uint8)
        off = (-raw.data_ptr()) % align
        out = raw[off:off + n].view(t.dtype).view(t.shape)
        out.copy_(t)
        return out
    cls.pin_memory = pin_memory
    cls.is_pinned = lambda self, t: t.numel() > 0 and t.data_ptr() % align == 0


def install_nvme_ckpt_fix(rank):
    if getattr(shutil.copytree, "_dszero", False):
        return
    orig, sub = shutil.copytree, f"rank{rank:02d}"

    def copytree(src, dst, *a, **k):
        if os.path.basename(os.path.normpath(dst)) == "offloaded_tensors":
            dst = os.path.join(dst, sub)
        elif os.path.basename(os.path.normpath(src)) == "offloaded_tensors":
            src = os.path.join(src, sub)
        return orig(src, dst, *a, **k)
    copytree._dszero = True
    shutil.copytree = copytree


# ----------------------------------------------------------------------------- selection
def install_sdpa_stub():
    import torch.nn.functional as F
    if hasattr(F, "scaled_dot_product_attention"):
        return False

    def scaled_dot_product_attention(*a, **k):
        raise NotImplementedError("torch 1.13 has no scaled_dot_product_attention (compat.install_sdpa_stub)")
    F.scaled_dot_product_attention = scaled_dot_product_attention
    return True


def uses_nvme(cfg):
    z = cfg.get("zero_optimization") or {}
    return any((z.get(k) or {}).get("device") == "nvme" for k in ("offload_optimizer", "offload_param"))


def install_for(cfg, rank):
    """Installs what the config needs; returns the PATCH_NOTES keys applied, in order."""
    applied = []
    if gloo_needed():
        install_gloo()
        applied.append("gloo")
    install_cxx17()
    applied.append("cxx17")
    if (cfg.get("fp16") or {}).get("enabled"):
        install_cpu_fp16()
        applied.append("cpu_fp16")
    if str((cfg.get("optimizer") or {}).get("type", "")).lower() in ("onebitadam", "zerooneadam", "onebitlamb"):
        import onebit_backend
        onebit_backend.install()
        applied.append("onebit_nccl")
    if (cfg.get("flops_profiler") or {}).get("enabled") and install_sdpa_stub():
        applied.append("sdpa_stub")
    z = cfg.get("zero_optimization") or {}
    if z.get("zero_quantized_weights") or z.get("zero_quantized_gradients"):
        import quantizer_port
        quantizer_port.install()
        applied.append("quantizer")
    if uses_nvme(cfg):
        install_aio()
        install_aligned_pin_memory()
        install_nvme_ckpt_fix(rank)
        applied += ["aio", "aio_pinned", "nvme_ckpt"]
    return applied
