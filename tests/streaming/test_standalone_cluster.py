"""The job's Spark code on a real standalone cluster (master + 2 workers on loopback).

``replay --engine spark --spark-master spark://...`` runs the same router and per-key
state functions as the streaming job, on executors in other JVMs and Python workers;
its verdicts and alerts must be byte-identical to the local engine's.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path_factory.mktemp("work"))}
    port, ui = free_port(), free_port()
    procs = [subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    url = f"spark://127.0.0.1:{port}"
    for _ in range(2):
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host",
                                       "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    try:
        deadline = time.monotonic() + 120
        alive = 0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    alive = sum(1 for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE")
            except OSError:
                pass
            if alive == 2:
                break
            time.sleep(1)
        assert alive == 2, "the standalone workers did not register"
        yield url, env
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def test_replay_on_standalone_cluster_matches_local(cluster, tmp_path):
    url, env = cluster
    knobs = replace(profile("mixed"), groups=6)
    events = simulate(SimConfig(knobs=knobs, seed=21, duration_ms=None, max_events=3000))
    trace = tmp_path / "events.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    exe = shutil.which("fencewatch", path=str(Path(sys.executable).parent))
    outs = {}
    for engine, extra in (("local", []), ("spark", ["--spark-master", url])):
        v, a = tmp_path / f"v-{engine}.jsonl", tmp_path / f"a-{engine}.jsonl"
        res = subprocess.run([exe, "replay", str(trace), "--engine", engine, "--out", str(v), "--alerts", str(a),
                              "--quiet", *extra], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        outs[engine] = (v.read_bytes(), a.read_bytes())
    assert outs["spark"] == outs["local"]
    assert outs["local"][0].count(b"\n") > 1000
