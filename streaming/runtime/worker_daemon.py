"""The Python worker daemon Spark forks the job's Python workers from (``spark.python.daemon.module``).

pyspark's own daemon imports nothing before it forks, so every worker imports pyspark (from
``pyspark.zip``: compiled from source each time, a zip gets no bytecode cache), pandas, pyarrow
and fencewatch itself on its first task, and a reused worker runs a full ``gc.collect()``
after every task over all of those modules' objects. Profiled on the job, imports and those
collections were the largest part of the Python workers' samples (docs/decisions.md, "The
Python workers").

This daemon imports them once, freezes them out of the garbage collector (``gc.freeze``: a
collection then only walks what a task made), and runs pyspark's daemon, which forks workers
that have everything already. Forking is only safe without other threads: numpy's OpenBLAS
pool and pyarrow's jemalloc background thread are turned off before the imports (workers use
neither), and if a thread is still there the daemon says so on stderr (the executor's log).

A reused worker hands the C allocator's freed memory back to the system after every task
(``malloc_trim``, see :func:`trim_after_tasks`): inside the job's workers (issue 15), glibc's
arenas held freed chunks per worker (``mallinfo2().fordblks``; the Kafka consumer's threads
allocate in arenas of their own) that a later task did not reuse, while Arrow's pool was empty
between tasks (docs/reliability.md, "Soak").
``FENCEWATCH_WORKER_TRIM=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
from typing import Callable

# Before numpy and pyarrow load: no threads of theirs in the process we fork from.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

PRELOAD = ("pandas", "pyarrow", "pyspark.worker", "fencewatch.streaming.runtime.state_fn",
           "fencewatch.streaming.sources.kafka.datasource")


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` (returns free memory of every arena to the system), or None
    where there is no glibc (macOS, musl: nothing to call)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


def trim_after_tasks(daemon_module, trim: Callable[[], object] | None = None) -> bool:
    """Make every worker ``daemon_module`` forks call ``trim`` after each task it runs.

    pyspark's daemon runs a reused worker's tasks in a loop of ``worker(sock, authenticated)``
    calls (looked up in its module each time); this wraps that function. Off with
    ``FENCEWATCH_WORKER_TRIM=0`` or without glibc; True if installed."""
    if os.environ.get("FENCEWATCH_WORKER_TRIM", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    trim = trim or malloc_trim()
    if trim is None:
        return False
    task = daemon_module.worker

    @functools.wraps(task)
    def worker(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        finally:
            trim()

    worker.fencewatch_trim = True
    daemon_module.worker = worker
    return True


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


def prefer_installed_pyspark() -> list[str]:
    """Drop Spark's ``pyspark.zip`` and ``py4j-*-src.zip`` from ``sys.path`` when the same pyspark
    is installed in this Python; the zips removed.

    Why: Spark puts the zips first on the workers' ``PYTHONPATH``, so they import pyspark from a
    zip (compiled from source: a zip gets no bytecode cache), and every task's
    ``setup_spark_files`` calls ``importlib.invalidate_caches``, which makes the zip importer
    re-read the archive's directory, a measurable share of the workers' time on the job
    (docs/decisions.md, "Figures that were in code comments"). Only an installed copy of the same version replaces them (a cluster whose Python
    has no pyspark, or another version, keeps the zips)."""
    import importlib.machinery
    import zipfile

    zips = [p for p in sys.path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    if not zips:
        return []
    rest = [p for p in sys.path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return []
    installed = os.path.join(os.path.dirname(spec.origin), "version.py")
    try:
        with open(installed) as fh:
            mine = fh.read()
        spark_zip = next(p for p in zips if os.path.basename(p).startswith("pyspark"))
        with zipfile.ZipFile(spark_zip) as zf:
            theirs = zf.read("pyspark/version.py").decode()
    except (OSError, KeyError, StopIteration, zipfile.BadZipFile):
        return []
    if mine != theirs or importlib.machinery.PathFinder.find_spec("py4j", rest) is None:
        return []
    sys.path[:] = rest
    for p in zips:
        sys.path_importer_cache.pop(p, None)
    return zips


if __name__ == "__main__":
    prefer_installed_pyspark()
    extra = preload()
    if extra:
        print(f"fencewatch worker daemon: threads besides the main one before forking: {extra}", file=sys.stderr)
    from pyspark import daemon

    trim_after_tasks(daemon)
    daemon.manager()
