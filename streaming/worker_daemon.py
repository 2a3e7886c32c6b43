"""The Python worker daemon Spark forks the job's Python workers from (``spark.python.daemon.module``).

pyspark's own daemon imports nothing before it forks, so every worker imports pyspark (from
``pyspark.zip``: compiled from source each time, a zip gets no bytecode cache), pandas, pyarrow
and fencewatch itself on its first task, and a reused worker runs a full ``gc.collect()``
after every task over all of those modules' objects. Profiled on the job (docs/benchmarks.md,
issue 14): imports and those collections were over half of the Python workers' samples.

This daemon imports them once, freezes them out of the garbage collector (``gc.freeze``: a
collection then only walks what a task made), and runs pyspark's daemon, which forks workers
that have everything already. Forking is only safe without other threads: numpy's OpenBLAS
pool and pyarrow's jemalloc background thread are turned off before the imports (workers use
neither), and if a thread is still there the daemon says so on stderr (the executor's log).
"""
from __future__ import annotations

import os
import sys

# Before numpy and pyarrow load: no threads of theirs in the process we fork from.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

PRELOAD = ("pandas", "pyarrow", "pyspark.worker", "fencewatch.streaming.state_fn",
           "fencewatch.streaming.sources.kafka")


def preload(modules=PRELOAD) -> list[str]:
    """Import ``modules`` and freeze everything alive into the permanent generation; the threads
    found afterwards besides this one (empty when forking is safe)."""
    import gc
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a worker imports what it needs itself: preloading is only a head start
            print(f"fencewatch worker daemon: preloading {name} failed: {exc!r}", file=sys.stderr)
    gc.collect()
    gc.freeze()
    try:
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    except OSError:  # not Linux: trust the settings above
        return []
    return names[1:]


if __name__ == "__main__":
    extra = preload()
    if extra:
        print(f"fencewatch worker daemon: threads besides the main one before forking: {extra}", file=sys.stderr)
    from pyspark import daemon

    daemon.manager()
