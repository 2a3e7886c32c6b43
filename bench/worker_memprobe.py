"""Diagnostic (issue 15): the job's worker daemon, plus a memory sample written by every forked
Python worker after each task, to find what grows in the workers (native or Python memory).

Run the job (or a bench) with it as the daemon module and this directory on the path::

    FWMEM_DIR=/tmp/fwmem PYTHONPATH=bench python bench/bench_soak.py --duration 360 \\
        --conf spark.python.daemon.module=worker_memprobe

Each worker appends JSON lines to ``$FWMEM_DIR/<pid>.jsonl`` (``FWMEM_EVERY``: every n-th task):
RSS and anonymous memory (``/proc/self/smaps_rollup``), Arrow's allocations and pool
(``pa.total_allocated_bytes``, backend, bytes allocated, max), glibc's ``mallinfo2`` (arena: bytes
from the system outside mmap'ed chunks, hblkhd: mmap'ed chunks, uord: in use, ford: free but
kept), the entries of fencewatch's memo tables, CPython's live blocks (``sys.getallocatedblocks``) and its small-object arenas
(``sys._debugmallocstats``: 1 MiB each, freed only when wholly empty). Sampling costs a
few ms per task. The fencewatch daemon's trim after each task stays on unless
``FENCEWATCH_WORKER_TRIM=0``.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import time


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _rollup() -> dict[str, int]:
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            p = line.split()
            if p[0] in ("Rss:", "Anonymous:", "Private_Dirty:"):
                out[p[0][:-1]] = int(p[1]) // 1024
    return out


def _pymalloc_arenas() -> dict[str, int]:
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out = {}
    for line in text.splitlines():
        if line.startswith("# arenas allocated current"):
            out["py_arenas"] = int(line.split("=")[1].replace(",", ""))
        elif line.startswith("# arenas highwater mark"):
            out["py_arenas_hw"] = int(line.split("=")[1].replace(",", ""))
    return out


def _memo_entries() -> dict[str, int]:
    """Entries in fencewatch's bounded memo tables (module globals; only those loaded)."""
    out = {}
    for mod, names in (("fencewatch.streaming.ingest.events", ("_SHARED_TPS",)), ("fencewatch.state.judging", ("_OUTCOMES",)),
                       ("fencewatch.sinks.jsonl", ("_LAYOUTS", "_RESTS", "_REQUEST_TEXTS", "_js"))):
        m = sys.modules.get(mod)
        for name in names:
            table = getattr(m, name, None)
            if table is not None:
                out[f"memo{name}"] = table.cache_info().currsize if hasattr(table, "cache_info") else len(table)
    return out


def sample(tasks: int) -> dict:
    import pyarrow as pa

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    mi = libc.mallinfo2()
    pool = pa.default_memory_pool()
    mb = 2 ** 20
    return {"pid": os.getpid(), "t": time.time(), "tasks": tasks, **_rollup(),
            "pa_total": pa.total_allocated_bytes() / mb, "pool": pool.backend_name,
            "pool_alloc": pool.bytes_allocated() / mb, "pool_max": pool.max_memory() / mb,
            "m_arena": mi.arena / mb, "m_hblkhd": mi.hblkhd / mb, "m_uord": mi.uordblks / mb,
            "m_ford": mi.fordblks / mb, "py_blocks": sys.getallocatedblocks(), **_pymalloc_arenas(), **_memo_entries()}


def _trace(tasks: int, state: dict) -> None:
    """``FWMEM_TRACE=n``: tracemalloc from the worker's first task; from task n on, every n tasks,
    the 12 allocation sites that grew most since task n (``$FWMEM_DIR/<pid>.trace``)."""
    import tracemalloc

    n = int(os.environ["FWMEM_TRACE"])
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ.get("FWMEM_FRAMES", "6")))
        return
    if tasks % n:
        return
    import gc

    gc.collect()  # what the daemon does after the task anyway: cyclic garbage out of the comparison
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    if "base" not in state:
        state["base"] = snap
        return
    with open(os.path.join(os.environ.get("FWMEM_DIR", "/tmp"), f"{os.getpid()}.trace"), "a") as f:
        f.write(f"== task {tasks}, traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB\n")
        for stat in snap.compare_to(state["base"], "traceback")[:12]:
            f.write(f"{stat.size_diff / 2**20:+.2f} MB {stat.count_diff:+d} blocks\n")
            for line in stat.traceback.format()[-16:]:
                f.write(f"    {line}\n")


def install(daemon_module) -> None:
    task, every, tasks, state = daemon_module.worker, int(os.environ.get("FWMEM_EVERY", "1")), [0], {}

    def worker(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        finally:
            tasks[0] += 1
            if tasks[0] % every == 0:
                with open(os.path.join(os.environ.get("FWMEM_DIR", "/tmp"), f"{os.getpid()}.jsonl"), "a") as f:
                    f.write(json.dumps(sample(tasks[0])) + "\n")
            if os.environ.get("FWMEM_TRACE"):
                _trace(tasks[0], state)

    daemon_module.worker = worker


if __name__ == "__main__":
    from fencewatch.streaming.runtime.worker_daemon import preload, trim_after_tasks

    preload()
    from pyspark import daemon

    trim_after_tasks(daemon)
    install(daemon)  # outermost: samples after the trim
    daemon.manager()
