"""fencewatch's log4j2 file reaches Spark's JVMs where fencewatch does not start them itself: the
driver and the executors under the spark-operator (deploy/kubernetes) and under
deploy/spark-submit.sh. Without it they log at INFO (Spark's log4j2-defaults.properties).

The JVMs run for real: the image's entrypoint (``driver`` through pyspark's spark-submit, and
``executor``, Spark's Kubernetes executor backend), with the Java options the manifests give,
and the files the ConfigMap holds, laid out at their mount path under a temporary folder.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_files import DEPLOY, KUBERNETES, ROOT, one
from k8s_objects import pod_of

SPARK_DEFAULTS = "Using Spark's default log4j profile"
STREAMING = ROOT / "streaming" / "runtime"


def _pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def test_the_config_map_holds_fencewatchs_own_log4j2_files():
    data = one("ConfigMap", "fencewatch-log4j2")["data"]
    assert set(data) == {"log4j2.properties", "log4j2-json.properties"}
    for name, text in data.items():
        assert text == (STREAMING / name).read_text(), f"deploy/kubernetes/log4j2/{name} differs from streaming/{name}"


def _java_options(role: str) -> list[str]:
    conf = one("SparkApplication")["spec"]["sparkConf"]
    # Spark reads spark.<role>.extraJavaOptions with spark.<role>.defaultJavaOptions prepended.
    return shlex.split(" ".join(conf.get(f"spark.{role}.{kind}JavaOptions", "") for kind in ("default", "extra")))


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_each_jvm_names_a_log4j2_file_its_pod_mounts(role):
    files = [o.split("=", 1)[1] for o in _java_options(role) if o.startswith("-Dlog4j2.configurationFile=")]
    assert len(files) == 1, _java_options(role)
    path = files[0].removeprefix("file:")
    pod = pod_of(one("SparkApplication"), role)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    source = one("ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    assert source["metadata"]["name"] == volumes[mount["name"]]["configMap"]["name"]
    assert path[len(mount["mountPath"]) + 1:] in source["data"]


def _laid_out(tmp_path: Path, role: str) -> list[str]:
    """The role's Java options, the ConfigMap's files written under tmp_path at their mount path."""
    pod = pod_of(one("SparkApplication"), role)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for mount in pod["spec"]["containers"][0]["volumeMounts"]:
        if "configMap" in volumes[mount["name"]]:
            folder = tmp_path / mount["mountPath"].lstrip("/")
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in one("ConfigMap", volumes[mount["name"]]["configMap"]["name"])["data"].items():
                (folder / name).write_text(text)
    return [o.replace("file:/", f"file:{tmp_path}/") for o in _java_options(role)]


def _executor(tmp_path: Path, java_options: list[str]) -> str:
    """Start the entrypoint's executor branch (it stops: no driver answers) and return its log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_JAVA_OPT_")} | {
        "SPARK_HOME": _pyspark_home(), "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1", "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "app-test", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "fencewatch-exec-1", "SPARK_LOCAL_IP": "127.0.0.1"}
    # Spark on Kubernetes hands an executor its Java options as SPARK_JAVA_OPT_0, _1, ...
    env |= {f"SPARK_JAVA_OPT_{i}": o for i, o in enumerate(java_options)}
    done = subprocess.run(["bash", str(DEPLOY / "entrypoint.sh"), "executor"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode != 0 and "Failed to connect" in done.stdout + done.stderr, done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.spark
def test_the_executor_jvm_logs_through_the_config_maps_file(tmp_path):
    ours = _executor(tmp_path, _laid_out(tmp_path, "executor"))
    # Spark says when it falls back to its defaults (no configuration found): it did not here.
    assert SPARK_DEFAULTS not in ours and "StatusLogger" not in ours
    assert " INFO " not in ours, ours[:2000]
    # Control: the same JVM without the option logs at INFO through Spark's defaults.
    theirs = _executor(tmp_path, [])
    assert SPARK_DEFAULTS in theirs and " INFO " in theirs


TINY_APP = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("rows", spark.range(3).count())
spark.stop()
"""


def _driver(tmp_path: Path, properties: dict[str, str], app: Path) -> subprocess.CompletedProcess:
    """The entrypoint's driver branch as a driver pod runs it: spark-submit in client mode with the
    properties file Spark writes for it (here: the SparkApplication's sparkConf)."""
    props = tmp_path / "spark.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    return subprocess.run(["bash", str(DEPLOY / "entrypoint.sh"), "driver", "--properties-file", str(props),
                           "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(app)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)


@pytest.mark.slow
@pytest.mark.spark
def test_the_driver_jvm_logs_through_the_config_maps_file(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(TINY_APP)
    options = " ".join(_laid_out(tmp_path, "driver"))
    done = _driver(tmp_path, {"spark.driver.defaultJavaOptions": options}, app)
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]
    assert SPARK_DEFAULTS not in done.stderr and " INFO " not in done.stderr, done.stderr[:2000]


def _recorded_spark_submit(tmp_path: Path, extra_env: dict[str, str] | None = None) -> list[str]:
    """deploy/spark-submit.sh's spark-submit command line, recorded instead of run."""
    recorder = tmp_path / "spark-submit"
    recorder.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    recorder.chmod(0o755)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MASTER": "local[1]",
           "SPARK_SUBMIT": str(recorder), **(extra_env or {})}
    done = subprocess.run(["bash", str(DEPLOY / "spark-submit.sh"), "--bootstrap-servers", "k:9092"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _confs(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


@pytest.mark.parametrize("log_format,name", [("text", "log4j2.properties"), ("json", "log4j2-json.properties")])
def test_spark_submit_sh_gives_driver_and_executors_fencewatchs_log4j2_file(tmp_path, log_format, name):
    confs = _confs(_recorded_spark_submit(tmp_path, {"LOG_FORMAT": log_format}))
    for role in ("driver", "executor"):
        option = confs[f"spark.{role}.defaultJavaOptions"]
        assert option.startswith("-Dlog4j2.configurationFile=file:")
        path = Path(option.split("file:", 1)[1])
        assert path.read_text() == (STREAMING / name).read_text()
    other = _confs(_recorded_spark_submit(tmp_path, {"EXECUTOR_LOG4J2": "/opt/venv/log4j2.properties"}))
    assert other["spark.executor.defaultJavaOptions"] == "-Dlog4j2.configurationFile=file:/opt/venv/log4j2.properties"


@pytest.mark.slow
@pytest.mark.spark
def test_spark_submit_sh_options_quiet_a_real_driver(tmp_path):
    """The options spark-submit.sh passes, given to pyspark's real spark-submit: no INFO lines."""
    confs = _confs(_recorded_spark_submit(tmp_path))
    app = tmp_path / "app.py"
    app.write_text(TINY_APP)
    done = _driver(tmp_path, {k: v for k, v in confs.items() if k.endswith("JavaOptions")}, app)
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]
    assert SPARK_DEFAULTS not in done.stderr and " INFO " not in done.stderr, done.stderr[:2000]
