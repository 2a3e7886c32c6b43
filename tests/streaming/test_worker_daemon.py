"""The job's Python worker daemon (preloaded, frozen, forked without threads) and the local
checkpoint file manager: the two start-up and per-batch costs the profile named (issue 14)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fencewatch.streaming.spark import FS_CHECKPOINT_MANAGER, WORKER_DAEMON, checkpoint_conf


def _python(code: str, timeout: float = 300) -> dict:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_preload_leaves_no_thread_to_fork_beside():
    out = _python("""
        import gc, json, sys
        from fencewatch.streaming.worker_daemon import preload
        extra = preload()
        print(json.dumps({"extra": extra, "frozen": gc.get_freeze_count(),
                          "loaded": [m for m in ("pandas", "pyarrow", "pyspark.worker",
                                                 "fencewatch.streaming.state_fn") if m in sys.modules]}))
    """)
    assert out["extra"] == []
    assert out["frozen"] > 10_000  # pandas, pyarrow and pyspark's objects, out of every task's gc.collect()
    assert out["loaded"] == ["pandas", "pyarrow", "pyspark.worker", "fencewatch.streaming.state_fn"]


def test_a_failing_preload_is_reported_not_fatal():
    out = _python("""
        import json
        from fencewatch.streaming.worker_daemon import preload
        print(json.dumps({"extra": preload(("fencewatch.no_such_module", "pandas"))}))
    """)
    assert out["extra"] == []


@pytest.mark.spark
def test_session_workers_fork_from_the_preloading_daemon(tmp_path):
    """A task of a session built by ``spark_session`` runs in a worker forked from our daemon,
    with the preloaded objects frozen (so pyspark's per-task ``gc.collect()`` skips them)."""
    out = _python(f"""
        import json
        from fencewatch.streaming.spark import spark_session
        spark = spark_session("local[1]", shuffle_partitions=1)

        def probe(batches):
            import gc, sys
            import pandas as pd
            for _ in batches:
                pass
            main = sys.modules["__main__"]
            yield pd.DataFrame({{"daemon": [getattr(main.__spec__, "name", None)],
                                 "frozen": [gc.get_freeze_count()]}})

        row = spark.range(3).mapInPandas(probe, "daemon string, frozen long").collect()[0]
        spark.stop()
        print(json.dumps({{"daemon": row.daemon, "frozen": row.frozen}}))
    """)
    assert out["daemon"] == WORKER_DAEMON
    assert out["frozen"] > 10_000


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
