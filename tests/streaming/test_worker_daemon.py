"""The job's Python worker daemon (preloaded, frozen, forked without threads; issue 14) and its
trim after each task (issue 15), and the local checkpoint file manager: the two start-up and
per-batch costs the profile named (issue 14)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest

from fencewatch.streaming.runtime.session import FS_CHECKPOINT_MANAGER, WORKER_DAEMON, checkpoint_conf
from fencewatch.streaming.runtime.worker_daemon import malloc_trim, trim_after_tasks


def _python(code: str, timeout: float = 300) -> dict:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_preload_leaves_no_thread_to_fork_beside():
    out = _python("""
        import gc, json, sys
        from fencewatch.streaming.runtime.worker_daemon import preload
        extra = preload()
        print(json.dumps({"extra": extra, "frozen": gc.get_freeze_count(),
                          "loaded": [m for m in ("pandas", "pyarrow", "pyspark.worker",
                                                 "fencewatch.streaming.runtime.state_fn") if m in sys.modules]}))
    """)
    assert out["extra"] == []
    assert out["frozen"] > 10_000  # pandas, pyarrow and pyspark's objects, out of every task's gc.collect()
    assert out["loaded"] == ["pandas", "pyarrow", "pyspark.worker", "fencewatch.streaming.runtime.state_fn"]


def test_a_failing_preload_is_reported_not_fatal():
    out = _python("""
        import json
        from fencewatch.streaming.runtime.worker_daemon import preload
        print(json.dumps({"extra": preload(("fencewatch.no_such_module", "pandas"))}))
    """)
    assert out["extra"] == []


def test_a_reused_worker_trims_after_every_task(monkeypatch):
    """The daemon's per-task ``worker`` is wrapped: the task's exit code comes back unchanged and
    the trim runs after each task, a failing one included."""
    monkeypatch.delenv("FENCEWATCH_WORKER_TRIM", raising=False)
    calls = []

    def worker(sock, authenticated):
        calls.append(("task", sock))
        if sock == "bad":
            raise RuntimeError("task failed")
        return 0 if authenticated else 1

    daemon = types.SimpleNamespace(worker=worker)
    assert trim_after_tasks(daemon, trim=lambda: calls.append(("trim", None)))
    assert daemon.worker("s1", True) == 0
    assert daemon.worker("s2", False) == 1
    with pytest.raises(RuntimeError):
        daemon.worker("bad", True)
    assert calls == [("task", "s1"), ("trim", None), ("task", "s2"), ("trim", None), ("task", "bad"), ("trim", None)]


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_the_trim_can_be_turned_off(monkeypatch, value):
    monkeypatch.setenv("FENCEWATCH_WORKER_TRIM", value)
    daemon = types.SimpleNamespace(worker=lambda sock, authenticated: 0)
    before = daemon.worker
    assert not trim_after_tasks(daemon, trim=lambda: None)
    assert daemon.worker is before


@pytest.mark.skipif(not sys.platform.startswith("linux") or malloc_trim() is None, reason="glibc only")
def test_malloc_trim_returns_what_an_ended_thread_freed():
    """The mechanism behind the workers' growth (issue 15): memory a thread malloc'ed and freed
    (the Kafka consumer's threads, in a worker) stays in the process, in that thread's arena, after
    the thread ends; ``malloc_trim`` gives it back."""
    out = _python("""
        import ctypes, json, threading
        from fencewatch.streaming.runtime.worker_daemon import malloc_trim
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]

        def rss_mb():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

        def task():  # 100 MB in 4 kB blocks, all freed but the last (the arena's top stays)
            blocks = [libc.malloc(4000) for _ in range(25_000)]
            for b in blocks:
                ctypes.memset(b, 1, 4000)
            for b in blocks[:-1]:
                libc.free(b)

        start = rss_mb()
        t = threading.Thread(target=task)
        t.start()
        t.join()
        held = rss_mb()
        malloc_trim()()
        print(json.dumps({"held": held - start, "after_trim": rss_mb() - start}))
    """)
    assert out["held"] > 80  # freed, thread gone, still resident: what the workers accumulated
    assert out["after_trim"] < 20


@pytest.mark.spark
def test_session_workers_fork_from_the_preloading_daemon(tmp_path):
    """A task of a session built by ``spark_session`` runs in a worker forked from our daemon,
    with the preloaded objects frozen (so pyspark's per-task ``gc.collect()`` skips them)."""
    out = _python(f"""
        import json
        from fencewatch.streaming.runtime.session import spark_session
        spark = spark_session("local[1]")  # shuffle partitions: two per core of the master

        def probe(batches):
            import gc, sys
            import pandas as pd
            for _ in batches:
                pass
            main = sys.modules["__main__"]
            trims = getattr(sys.modules["pyspark.daemon"].worker, "fencewatch_trim", False)
            yield pd.DataFrame({{"daemon": [getattr(main.__spec__, "name", None)],
                                 "frozen": [gc.get_freeze_count()], "trims": [trims]}})

        row = spark.range(3).mapInPandas(probe, "daemon string, frozen long, trims boolean").collect()[0]
        partitions = spark.conf.get("spark.sql.shuffle.partitions")
        spark.stop()
        print(json.dumps({{"daemon": row.daemon, "frozen": row.frozen, "trims": row.trims,
                           "partitions": partitions}}))
    """)
    assert out["partitions"] == "2"  # not a fixed default: two state tasks per core (PARTITIONS_PER_CORE)
    assert out["daemon"] == WORKER_DAEMON
    assert out["frozen"] > 10_000
    assert out["trims"] is True  # the worker's task loop calls malloc_trim after each task


@pytest.mark.parametrize("location, expected", [
    ("./fencewatch-checkpoint", FS_CHECKPOINT_MANAGER),
    ("/var/lib/fencewatch/cp", FS_CHECKPOINT_MANAGER),
    ("file:///var/lib/fencewatch/cp", FS_CHECKPOINT_MANAGER),
    ("hdfs://nn:8020/fencewatch/cp", None),
    ("s3a://bucket/fencewatch/cp", None),
    ("", None),
], ids=["relative", "absolute", "file-uri", "hdfs", "s3a", "unset"])
def test_local_checkpoints_use_the_file_system_manager(location, expected):
    assert checkpoint_conf(location).get("spark.sql.streaming.checkpointFileManagerClass") == expected


def test_spark_zips_give_way_to_the_same_installed_pyspark():
    """Spark puts pyspark.zip first on the workers' path; the daemon imports the installed copy
    of the same version instead (bytecode cached, no zip directory re-read per task)."""
    out = _python("""
        import json, os, sys, pyspark
        lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
        zips = sorted(os.path.join(lib, f) for f in os.listdir(lib) if f.endswith(".zip"))
        for module in [m for m in sys.modules if m == "pyspark" or m.startswith(("pyspark.", "py4j"))]:
            del sys.modules[module]
        sys.path[:0] = zips
        from fencewatch.streaming.runtime.worker_daemon import prefer_installed_pyspark
        removed = prefer_installed_pyspark()
        import pyspark.worker
        print(json.dumps({"zips": zips, "removed": removed, "left": [p for p in sys.path if p in zips],
                          "from": pyspark.worker.__file__}))
    """)
    assert len(out["zips"]) == 2 and sorted(out["removed"]) == out["zips"] and out["left"] == []
    assert ".zip" not in out["from"]


def test_spark_zips_stay_when_the_installed_pyspark_differs(tmp_path):
    import zipfile

    fake = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("pyspark/version.py", '__version__: str = "0.0.1"\n')
    out = _python(f"""
        import json, sys
        sys.path.insert(0, {str(fake)!r})
        from fencewatch.streaming.runtime.worker_daemon import prefer_installed_pyspark
        print(json.dumps({{"removed": prefer_installed_pyspark(), "kept": {str(fake)!r} in sys.path}}))
    """)
    assert out == {"removed": [], "kept": True}
