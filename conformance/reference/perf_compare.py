"""dszero against PyTorch (and DeepSpeed, where installed) on this CPU, side by side.

The PyTorch/DeepSpeed side is ../shared/reference/harness/perf_train.py: its plain mode (one process,
torch.optim.AdamW + clip_grad_norm_) and, when `import deepspeed` works in --python, its DeepSpeed mode
under the harness's launch.py (2 ranks). dszero's side is `dszero train` on the same model (GPT-2 small
shape with an untied head and a padded vocabulary: the preset gpt2s-untied), sequence, micro-batch,
optimizer (AdamW lr 1e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1, clipping 1.0) and random tokens.

Runs are interleaved — for each repetition, each row, each thread count: theirs, then ours — so that a
change of the machine's load hits both sides alike. Each run's step time is the median of its timed
steps (after --warmup untimed ones); a row's is the median over the repetitions. Printed per row and
thread count: both step times, wall and CPU (a rank's user+system seconds in the step: on a shared
machine the work done when wall time is not; dszero's is read from /proc as each step is logged), dszero tokens/s ÷ theirs, peak RSS per process ÷ theirs (the process's
ru_maxrss from wait4), and the load average at the start and end of the pair; then, per side, the thread
scaling (tokens/s at N threads ÷ at 1).

    /usr/bin/python3 conformance/reference/perf_compare.py --dszero ./dszero \\
        [--harness ../shared/reference/harness] [--size gpt2s] [--warmup 1] [--steps 3] [--reps 2] \\
        [--threads 1,2] [--rows plain,z0,z2,z3,z3_offcpu] [--math fast] [--dszero-mpi ./dszero-mpi] \\
        [--blas-core auto]

Rows other than plain need DeepSpeed. dszero's side of them runs 2 ranks: with --dszero-mpi as 2 processes
under mpirun, as DeepSpeed's ranks run (peak RSS per process is then per rank on both sides), else --nproc 2
in one process (its RSS then covers both ranks). Without DeepSpeed they are reported as skipped. Both
sides get the same OPENBLAS_CORETYPE (--blas-core; auto picks it by the CPU's features, because OpenBLAS
falls back to Prescott on a CPU model it does not know, as some VMs present). Needs python3 with torch
and psutil (the harness imports both). Every run's raw output stays under --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {  # perf_train.py's SIZES, with dszero's preset of the same shape
    "gpt2s": {"preset": "gpt2s-untied", "seq": 256},
    "smoke": {"preset": None, "seq": 32},
}

ROWS = {  # name: (DeepSpeed stage or None for plain PyTorch, offload_optimizer)
    "plain": (None, None),
    "z0": (0, None),
    "z1": (1, None),
    "z2": (2, None),
    "z3": (3, None),
    "z3_offcpu": (3, "cpu"),
}


def ds_config(stage, offload):
    """perf_train.py's ds_config for the row (micro 1, GAS 1)."""
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.1, "torch_adam": True}},
           "zero_optimization": {"stage": stage or 0}}
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": offload}
    return cfg


def blas_core(flags_path="/proc/cpuinfo"):
    """The OpenBLAS core type for this CPU's features (OPENBLAS_CORETYPE), or None when none fits.

    OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's family and model, and falls back to
    Prescott (SSE3) on a model it does not know, as a VM's generic "Intel(R) Xeon(R) Processor" is: both
    sides then run several times slower than the hardware allows. Choosing by features instead gives both
    sides the same kernels the issue's table was measured with (Cooperlake with AVX-512 BF16). The rule is
    blas.FeatureCore's, by which dszero re-tunes a misdetecting OpenBLAS by itself; PyTorch does not."""
    try:
        with open(flags_path) as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return None
    if "avx512_bf16" in flags:
        return "COOPERLAKE"
    if all(x in flags for x in ("avx512f", "avx512vl", "avx512bw", "avx512dq")):
        return "SKYLAKEX"
    if "avx2" in flags and "fma" in flags:
        return "HASWELL"
    return None


def proc_cpu_s(pid):
    """The user+system CPU seconds of process pid and all its descendants so far (/proc/*/stat), or None
    once pid is gone. The descendants count because dszero's ZeRO rows run under mpirun."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
    if pid not in cpu:
        return None
    total = 0.0
    for p, c in cpu.items():
        q = p
        while q > 1 and q != pid:
            q = parent.get(q, 0)
        if q == pid:
            total += c
    return total


def run(cmd, env, log, jsonl=None):
    """Runs cmd, its output to log; returns (exit status, peak RSS bytes of the process, CPU seconds at
    each line the process appended to jsonl, polled every 20 ms: dszero's --json-log has no CPU time)."""
    marks = []
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        while jsonl is not None:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid != 0:
                break
            cpu = proc_cpu_s(p.pid)
            try:
                with open(jsonl) as j:
                    lines = sum(1 for line in j if line.strip())
            except OSError:
                lines = 0
            while len(marks) < lines and cpu is not None:
                marks.append(cpu)
            time.sleep(0.02)
        else:
            _, status, ru = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024, marks


def median_timed(steps):
    t = [s for s in steps if s is not None]
    return statistics.median(t) if t else float("nan")


def theirs(args, row, threads, out):
    stage, offload = ROWS[row]
    env = dict(blas_env(args), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    os.makedirs(out, exist_ok=True)
    script = os.path.join(args.harness, "perf_train.py")
    if stage is None:
        cmd = [args.python, script, "--mode", "plain"]
    else:
        cmd = [args.python, os.path.join(args.harness, "launch.py"), "2", script, "--mode", "ds", "--stage", str(stage)]
        if offload:
            cmd += ["--offload-optimizer", offload]
    cmd += ["--size", args.size, "--warmup", str(args.warmup), "--steps", str(args.steps), "--out", out]
    rc, rss, _ = run(cmd, env, os.path.join(out, "log.txt"))
    res = None
    try:
        with open(os.path.join(out, "rank0.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        pass
    timed = [s for s in res["steps"] if s["timed"]] if res else []
    if rc != 0:
        # torch 1.13's gloo can abort at interpreter exit ("terminate called without an active
        # exception") after every rank has written its results: keep a run whose timed steps are all
        # there, and say so.
        if len(timed) < args.steps:
            raise RuntimeError(f"{' '.join(cmd)}: exit {rc}, see {out}/log.txt")
        print(f"  note: {row} theirs exited {rc} after writing all {len(timed)} timed steps (teardown); kept, see {out}/log.txt",
              flush=True)
    return median_timed([s["total_s"] for s in timed]), median_timed([s["cpu_s"] for s in timed]), res.get("peak_rss", rss)


def ours(args, row, threads, out):
    stage, offload = ROWS[row]
    os.makedirs(out, exist_ok=True)
    cfgp = os.path.join(out, "ds_config.json")
    with open(cfgp, "w") as f:
        json.dump(ds_config(stage, offload), f)
    logp = os.path.join(out, "steps.jsonl")
    sz = SIZES[args.size]
    if stage is not None and args.dszero_mpi:
        # Two processes under Open MPI, as the table ran: peak RSS is per process, per rank.
        cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
        if args.blas_core != "none":
            cmd += ["-x", "OPENBLAS_CORETYPE"]  # mpirun exports only what it is told to
        cmd.append(args.dszero_mpi)
    else:
        cmd = [args.dszero]
    cmd += ["train", "--deepspeed", cfgp, "--model", sz["preset"], "--seq", str(sz["seq"]),
           "--data", "random", "--steps", str(args.warmup + args.steps), "--threads", str(threads),
           "--math", args.math, "--quiet", "--json-log", logp]
    if stage is not None and not args.dszero_mpi:
        cmd += ["--nproc", "2"]
    rc, rss, marks = run(cmd, blas_env(args), os.path.join(out, "log.txt"), jsonl=logp)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {rc}, see {out}/log.txt")
    with open(logp) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    steps = [r["step_time_s"] for r in recs if r["step"] > args.warmup]
    # CPU seconds of step i: between the log lines of steps i-1 and i (rank 0 logs after each step).
    # Per rank, as theirs (rank 0's own process): the marks cover every rank of this run.
    ranks = 1 if stage is None else 2
    cpu = [(marks[i] - marks[i - 1]) / ranks for i in range(max(1, args.warmup), min(len(marks), len(recs)))]
    return median_timed(steps), median_timed(cpu), rss


def blas_env(args):
    """os.environ with OPENBLAS_CORETYPE set to --blas-core (unless that is "none")."""
    env = dict(os.environ)
    if args.blas_core != "none":
        env["OPENBLAS_CORETYPE"] = args.blas_core
    return env


def have_deepspeed(python):
    return subprocess.run([python, "-c", "import deepspeed"], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dszero", required=True, help="the dszero binary")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--harness", default=os.path.normpath(os.path.join(here, "../../../shared/reference/harness")))
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with torch for the harness")
    ap.add_argument("--size", default="gpt2s", choices=[s for s in SIZES if SIZES[s]["preset"]])
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (torch's OMP threads, dszero --threads)")
    ap.add_argument("--rows", default="plain,z0,z2,z3,z3_offcpu")
    ap.add_argument("--math", default="fast", choices=["fast", "exact"])
    ap.add_argument("--dszero-mpi", default=None,
                    help="a dszero built with -tags mpi: the ZeRO rows then run it as 2 processes under mpirun "
                         "(per-process RSS, as DeepSpeed's ranks); without it they run --nproc 2 in one process")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--blas-core", default="auto",
                    help="OPENBLAS_CORETYPE for both sides: auto (by this CPU's features), none (OpenBLAS decides), or a core name")
    ap.add_argument("--out", default=None, help="raw outputs (default: a new temporary directory)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.harness, "perf_train.py")):
        sys.exit(f"--harness {args.harness}: no perf_train.py there; give the shared reference harness directory")
    threads = [int(t) for t in args.threads.split(",")]
    rows = args.rows.split(",")
    for r in rows:
        if r not in ROWS:
            sys.exit(f"--rows: unknown row {r!r} (known: {', '.join(ROWS)})")
    if args.blas_core == "auto":
        args.blas_core = blas_core() or "none"
    out = args.out or tempfile.mkdtemp(prefix="dszero-perf-")
    ds = have_deepspeed(args.python)
    print(f"perf_compare: {args.size}, warmup {args.warmup}, {args.steps} timed steps, {args.reps} repetitions, "
          f"threads {threads}, dszero --math {args.math}; raw output in {out}")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()}; DeepSpeed {'importable' if ds else 'NOT importable'} in {args.python}; "
          f"OPENBLAS_CORETYPE {args.blas_core} on both sides; dszero's ZeRO rows "
          f"{'2 processes under ' + args.mpirun if args.dszero_mpi else '--nproc 2 in one process (RSS covers both ranks)'}")
    res = {}  # (row, threads) -> list of (their_s, our_s, their_rss, our_rss, load0, load1, their_cpu_s, our_cpu_s)
    for rep in range(args.reps):
        for row in rows:
            if ROWS[row][0] is not None and not ds:
                continue
            for n in threads:
                d = os.path.join(out, f"rep{rep + 1}", row, f"t{n}")
                l0 = os.getloadavg()[0]
                ts, tcpu, trss = theirs(args, row, n, os.path.join(d, "theirs"))
                os_, ocpu, orss = ours(args, row, n, os.path.join(d, "dszero"))
                l1 = os.getloadavg()[0]
                res.setdefault((row, n), []).append((ts, os_, trss, orss, l0, l1, tcpu, ocpu))
                print(f"  rep {rep + 1} {row:9s} {n} thread(s): theirs {ts:.3f} s/step ({tcpu:.3f} CPU s), "
                      f"dszero {os_:.3f} s/step ({ocpu:.3f} CPU s); ratio {ts / os_:.2f} wall, {tcpu / ocpu:.2f} CPU; "
                      f"load {l0:.2f} → {l1:.2f}", flush=True)
    print()
    print("| row | threads | theirs step s (CPU s) | dszero step s (CPU s) | dszero tokens/s ÷ theirs: wall (CPU) | peak RSS ÷ theirs | load (start → end) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if ROWS[row][0] is not None and not ds:
            print(f"| {row} | – | skipped: DeepSpeed is not importable in {args.python} | | | | |")
            continue
        for n in threads:
            v = res[(row, n)]
            ts, os_ = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            tc, oc = statistics.median(x[6] for x in v), statistics.median(x[7] for x in v)
            rss = statistics.median(x[3] / x[2] for x in v)
            loads = ", ".join(f"{x[4]:.1f}→{x[5]:.1f}" for x in v)
            print(f"| {row} | {n} | {ts:.3f} ({tc:.3f}) | {os_:.3f} ({oc:.3f}) | {ts / os_:.2f} ({tc / oc:.2f}) | {rss:.2f} | {loads} |")
    if len(threads) > 1:
        print()
        print("thread scaling, wall (tokens/s at N threads ÷ at 1; ideal N):")
        for row in rows:
            if (row, 1) not in res:
                continue
            base = [statistics.median(x[i] for x in res[(row, 1)]) for i in (0, 1)]
            for n in threads[1:]:
                cur = [statistics.median(x[i] for x in res[(row, n)]) for i in (0, 1)]
                print(f"  {row} {n} threads: theirs {base[0] / cur[0]:.2f}, dszero {base[1] / cur[1]:.2f} "
                      f"(≥ {0.8 * n:.1f} wanted)")
    print(f"\nload at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
