"""Writes summary.txt and verbose.txt: what DeepSpeed's own CommsLogger
(deepspeed/utils/comms_logging.py, with trim_mean from deepspeed/utils/timer.py)
prints for the records in summary_input.json — log_all(print_log=True), the
table deepspeed.comm.log_summary() prints on rank 0, and the verbose line
append() logs for each op (log_dist's "[Rank 0] " prefix included).

DeepSpeed's files run unmodified; only the modules they import that need a
cluster (deepspeed.comm, the accelerator, log_dist) are stubbed.

Regenerate with DeepSpeed's source tree (commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641,
version 0.19.6, was used) and Debian's python3 (3.11) with python3-numpy:
    /usr/bin/python3 gen_golden.py PATH/TO/DeepSpeed
"""
import io
import json
import os
import shutil
import sys
import tempfile
import types
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    src = sys.argv[1]
    with open(os.path.join(HERE, "summary_input.json")) as f:
        spec = json.load(f)
    tmp = tempfile.mkdtemp()
    pkg = os.path.join(tmp, "deepspeed")
    for d in ("", "utils", "comm"):
        os.makedirs(os.path.join(pkg, d), exist_ok=True)
    for rel in ("utils/comms_logging.py", "utils/timer.py", "comm/constants.py", "comm/reduce_op.py"):
        shutil.copy(os.path.join(src, "deepspeed", rel), os.path.join(pkg, rel))
    open(os.path.join(pkg, "__init__.py"), "w").close()
    verbose = []
    with open(os.path.join(pkg, "utils", "__init__.py"), "w") as f:
        f.write("VERBOSE = []\n"
                "def log_dist(message, ranks=None, level=None):\n"
                "    VERBOSE.append('[Rank 0] ' + message)\n")
    with open(os.path.join(pkg, "utils", "logging.py"), "w") as f:
        f.write("def print_dist(message, ranks=None):\n    print(message)\n")
    with open(os.path.join(pkg, "comm", "__init__.py"), "w") as f:
        f.write("WORLD = %d\n"
                "def get_world_size():\n    return WORLD\n"
                "def get_rank():\n    return 0\n"
                "def is_initialized():\n    return True\n" % spec["world_size"])
    accel = types.ModuleType("deepspeed.accelerator")

    class _Accel:
        Event = None

        def use_host_timers(self):
            return True

    accel.get_accelerator = lambda: _Accel()
    sys.modules["deepspeed.accelerator"] = accel
    sys.path.insert(0, tmp)

    import deepspeed.utils as du
    from deepspeed.utils.comms_logging import CommsLogger

    cl = CommsLogger()
    cl.enabled = True
    cl.verbose = True
    for r in spec["records"]:
        cl.append(r["op"], r["name"], r["latency_ns"] / 1e6, r["bytes"])
    out = io.StringIO()
    with redirect_stdout(out):
        cl.log_all(print_log=True)
    with open(os.path.join(HERE, "summary.txt"), "w") as f:
        f.write(out.getvalue())
    with open(os.path.join(HERE, "verbose.txt"), "w") as f:
        f.write("".join(line + "\n" for line in du.VERBOSE))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
