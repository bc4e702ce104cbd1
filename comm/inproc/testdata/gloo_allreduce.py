"""All-reduces (SUM) each rank's buffers with torch's gloo backend.

    python3 gloo_allreduce.py WORLD DIR N [N ...]

Rank r reads DIR/in_r_N.f32 (raw little-endian float32) for every N, runs
dist.all_reduce on it, float32 and (as float16, the file's values
rounded by torch) bfloat16, and writes DIR/out_r_N.f32 and
DIR/out_r_N.f16. comm/inproc's TestGlooRingOrderTorch compares them with
dszero's in-process all-reduce bit for bit.
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, d, sizes):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"), rank=rank, world_size=world)
    for n in sizes:
        x = torch.from_numpy(np.fromfile(os.path.join(d, f"in_{rank}_{n}.f32"), dtype="<f4").copy())
        assert x.numel() == n, (x.numel(), n)
        y = x.clone()
        dist.all_reduce(y)
        y.numpy().astype("<f4").tofile(os.path.join(d, f"out_{rank}_{n}.f32"))
        b = x.to(torch.float16)
        dist.all_reduce(b)
        b.view(torch.int16).numpy().astype("<i2").tofile(os.path.join(d, f"out_{rank}_{n}.f16"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world, d = int(sys.argv[1]), sys.argv[2]
    sizes = [int(a) for a in sys.argv[3:]]
    mp.spawn(run, args=(world, d, sizes), nprocs=world, join=True)
    print("torch", torch.__version__, "gloo all_reduce done")
