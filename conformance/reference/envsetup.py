"""The environment gen_case.py gives its ranks (and gen_init.py itself); imports nothing heavy.

OpenBLAS picks its kernels when the library loads (at `import torch`), by CPU or by
OPENBLAS_CORETYPE, and kernel sets round matmuls differently: set it before torch is imported.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DS_SRC = os.environ.get("DS_SRC") or os.path.expanduser("~/.cache/dszero-ref/deepspeed-src")
PYTHONPATH = [HERE, os.path.join(HERE, "shims"), DS_SRC]   # our modules, hjson/ninja stand-ins, DeepSpeed
ENV = {
    "DS_ACCELERATOR": "cpu",      # DeepSpeed's CPU accelerator: gloo, no oneCCL
    "DS_BUILD_OPS": "0",          # nothing pre-built; CPU ops are JIT-built with ninja when needed
    "OMP_NUM_THREADS": "1",       # one thread per rank: deterministic kernels, ranks do not compete
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",   # no __pycache__ in the source tree
    "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR")
    or os.path.expanduser("~/.cache/dszero-ref/torch_extensions"),
}


def default_openblas_core():
    """The shipped references were made with OpenBLAS's SkylakeX kernels (an AVX-512 EPYC): AVX-512
    machines pin those; others keep OpenBLAS's own choice ("")."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "SkylakeX" if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd"} <= set(flags) else ""


def apply(openblas_core=None):
    """Sets ENV and OPENBLAS_CORETYPE in os.environ (inherited by child processes) and sys.path.
    openblas_core None: default_openblas_core(); "": OpenBLAS's own choice. Any OPENBLAS_CORETYPE
    already in the environment is replaced (some machines set one globally). Returns the core."""
    core = default_openblas_core() if openblas_core is None else openblas_core
    ambient = os.environ.pop("OPENBLAS_CORETYPE", None)
    if ambient is not None and ambient != core:
        print(f"note: OPENBLAS_CORETYPE={ambient} in the environment is replaced by {core or '(unset)'}",
              file=sys.stderr)
    if core:
        ENV["OPENBLAS_CORETYPE"] = core
    os.environ.update(ENV)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(PYTHONPATH + ([old] if old else []))
    sys.path[:0] = [p for p in PYTHONPATH if p not in sys.path]
    return core
