"""DeepSpeed 0.14.5's NcclBackend for the 1-bit optimizers, ported to torch.distributed on gloo.

deepspeed/runtime/comm/nccl.py imports cupy (CUDA) to pack the signs; its mpi.py needs mpi4py
and compressed.py an XPU packbits kernel, so none of DeepSpeed's compressed backends runs on a
CPU. install() puts this module's NcclBackend in its place (sys.modules), and DeepSpeed's own
OnebitAdam, ZeroOneAdam and OnebitLamb — which import it when comm_backend_name is "nccl" — run
unmodified inside DeepSpeed's engine.

compressed_allreduce is NcclBackend.compressed_allreduce op for op, with one change on the wire:
the ±1 sign tensors and the scales move as they are (an all_gather of every rank's signs, each
rank then keeping the chunk it serves, instead of cupy's packbits and an all_to_all_single of the
packed bytes). Packing signs into bits is lossless, so every value is DeepSpeed's.

With ONEBIT_DUMP=DIR in the environment every call also writes, per rank, r<rank>_c<call>_<k>.npy
(float32, flattened) for k = in (the padded buffer before the worker error is added), we and se
(the worker and server errors after the call) and out (the result), calls counted from 0 in the
order the optimizer makes them: what gen_onebit_golden.py reads.
"""
import os
import sys
import types

import numpy as np
import torch
import torch.distributed as td


class NcclBackend:

    def __init__(self, mpu=None):
        self.world_group = None if mpu is None else mpu.get_data_parallel_group()
        self.rank = td.get_rank(group=self.world_group)
        self.size = td.get_world_size(group=self.world_group)

    def _gather(self, t):
        out = [torch.empty_like(t) for _ in range(self.size)]
        td.all_gather(out, t.contiguous(), group=self.world_group)
        return out

    def compressed_allreduce(self, buffer_m, worker_error, server_error, local_rank):
        original_shape = buffer_m.size()
        if len(original_shape) > 1:
            buffer_m = torch.flatten(buffer_m)
        original_size = buffer_m.numel()
        worker_error_size = worker_error.numel()
        if original_size != worker_error_size:
            empty_tensor = torch.zeros(worker_error_size - original_size, device=buffer_m.device)
            buffer_m = torch.cat([buffer_m, empty_tensor])

        dump_in = buffer_m.clone() if os.environ.get("ONEBIT_DUMP") else None
        buffer_m.add_(worker_error)
        worker_scale = torch.linalg.norm(buffer_m) / np.sqrt(buffer_m.numel())
        worker_sign = buffer_m.sign().add_(1).bool().float().add_(-0.5).mul_(2.0)
        worker_error.set_(buffer_m - worker_scale * worker_sign)

        # Phase 1: rank j gets chunk j of every rank's signs, and every rank's scale.
        signs = self._gather(worker_sign)
        scales = self._gather(worker_scale.reshape(1))
        recvbuf_sign = torch.stack([s.chunk(self.size)[self.rank] for s in signs])
        compensated_server_m = recvbuf_sign.mul_(torch.stack(scales).mul_(1 / self.size)).sum(0)
        compensated_server_m.add_(server_error)
        server_scale = torch.linalg.norm(compensated_server_m) / np.sqrt(compensated_server_m.numel())
        server_sign = compensated_server_m.sign().add_(1).bool().float().add_(-0.5).mul_(2.0)
        server_error.set_(compensated_server_m - server_scale * server_sign)

        # Phase 2: every rank gets every chunk's signs and scale.
        recvbuf_sign_server = torch.stack(self._gather(server_sign))
        recvbuf_scale_server = torch.stack(self._gather(server_scale.reshape(1)))
        buffer_m.data.copy_(recvbuf_sign_server.mul_(recvbuf_scale_server).flatten().data)
        if dump_in is not None:
            self._dump(dump_in, worker_error, server_error, buffer_m)
        if original_size != worker_error_size:
            buffer_m = buffer_m[0:original_size]
        if len(original_shape) > 1:
            buffer_m = buffer_m.reshape(original_shape)
        return buffer_m

    def _dump(self, x, we, se, out):
        call = getattr(self, "_calls", 0)
        for k, v in (("in", x), ("we", we), ("se", se), ("out", out)):
            np.save(os.path.join(os.environ["ONEBIT_DUMP"], f"r{self.rank}_c{call}_{k}.npy"),
                    v.detach().reshape(-1).numpy())
        self._calls = call + 1


def install():
    mod = types.ModuleType("deepspeed.runtime.comm.nccl")
    mod.NcclBackend = NcclBackend
    mod.__doc__ = __doc__
    sys.modules["deepspeed.runtime.comm.nccl"] = mod
