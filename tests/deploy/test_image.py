"""deploy/Dockerfile: the image installs what this checkout builds, the way the project does.

No container engine runs on this project's machines (docs/deploy.md records what was tried), so
these tests run the Dockerfile's own steps on the host instead: the build stage's COPY list
against pyproject.toml and .dockerignore, its ``pip wheel`` command on a copy of exactly the
copied files, the runtime stage's install of that wheel, its ``fencewatch --help`` smoke test,
the entrypoint's dispatch, and the HEALTHCHECK command against a real metrics endpoint.
"""
from __future__ import annotations

import email.parser
import fnmatch
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from deploy_files import (DEPLOY, ROOT, dockerfile_args, dockerfile_instructions, expand, pyproject,
                          run_commands)

INSTRUCTIONS = dockerfile_instructions()
ARGS = dockerfile_args(INSTRUCTIONS)
RUNTIME = max(i.stage for i in INSTRUCTIONS)
BUILD = 0
JARS = next(i.stage for i in INSTRUCTIONS if i.keyword == "FROM" and i.args.endswith(" AS jars"))


def _copies(stage: int) -> list[tuple[list[str], str]]:
    """(sources, destination) of a stage's COPY steps from the build context (not --from)."""
    out = []
    for ins in INSTRUCTIONS:
        if ins.keyword == "COPY" and ins.stage == stage and "--from" not in ins.args:
            words = shlex.split(ins.args)
            out.append(([w.rstrip("/") for w in words[:-1]], words[-1]))
    return out


def _dockerignored(path: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    parts = Path(path).parts
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(parts[0], p)
               or (p.startswith("**/") and any(fnmatch.fnmatch(x, p[3:]) for x in parts)) for p in patterns)


# --------------------------------------------------------------------------- the base and the runtime


def test_base_image_is_pinned_to_an_exact_python_that_pyproject_allows():
    base = ARGS["PYTHON_IMAGE"]
    froms = {i.stage: expand(i.args.split()[0], ARGS) for i in INSTRUCTIONS if i.keyword == "FROM"}
    assert froms[BUILD] == froms[RUNTIME] == base, "the build and runtime stages start from the one pinned base"
    assert re.fullmatch(r"maven:\d+\.\d+\.\d+-eclipse-temurin-17(@sha256:[0-9a-f]{64})?", froms[JARS]), \
        f"{froms[JARS]}: the jars stage's Maven is pinned to an exact release"
    m = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", base)
    assert m, f"{base}: pin an exact Python patch release (and optionally a digest), never a moving tag"
    assert Version(m.group(1)) in SpecifierSet(pyproject()["project"]["requires-python"])


def test_runtime_has_java_17_runs_as_non_root_and_checks_its_metrics_endpoint():
    runtime = [i for i in INSTRUCTIONS if i.stage == RUNTIME]
    installs = " ".join(" ".join(c) for c in run_commands(INSTRUCTIONS, RUNTIME))
    assert "openjdk-17-jre-headless" in installs and "libjemalloc2" in installs
    env = " ".join(i.args for i in runtime if i.keyword == "ENV")
    assert "JAVA_HOME=/usr/lib/jvm/java-17 " in env
    assert "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" in installs, "any build architecture"
    users = [i for i in runtime if i.keyword == "USER"]
    assert users, "the runtime stage sets a USER"
    uid = expand(users[-1].args, ARGS).split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, "numeric non-root uid (Kubernetes runAsNonRoot checks numbers)"
    # every RUN after USER would run as that user; the image installs everything before it
    last_user = runtime.index(users[-1])
    assert not [i for i in runtime[last_user:] if i.keyword == "RUN"]
    assert [i for i in runtime if i.keyword == "HEALTHCHECK"]
    expose = [i.args for i in runtime if i.keyword == "EXPOSE"]
    from fencewatch.streaming.config.settings import SinksConfig
    assert expose == [str(SinksConfig().metrics_port)]


def test_spark_version_of_the_image_is_inside_pyproject_pin():
    pin = next(Requirement(d) for d in pyproject()["project"]["dependencies"] if d.startswith("pyspark"))
    assert Version(ARGS["SPARK_VERSION"]) in pin.specifier
    installs = [c for c in run_commands(INSTRUCTIONS, RUNTIME) if c[:2] == ["pip", "install"]]
    assert any(f"pyspark=={ARGS['SPARK_VERSION']}" in expand(" ".join(c), ARGS) for c in installs)


def test_sparks_kafka_connector_is_fetched_at_sparks_version_into_sparks_jars(tmp_path):
    """The jars stage's Maven command run on the host (Maven Central, or the local repository
    `make connector-jars` filled): exactly the connector and the three jars pyspark lacks, at the
    image's Spark version, copied into Spark's own jars (SPARK_HOME/jars) before the USER step."""
    (fetch,) = [c for c in run_commands(INSTRUCTIONS, JARS) if c[:1] == ["mvn"]]
    assert any(ins.keyword == "COPY" and ins.stage == JARS and ins.args.split()[0] == "pom-connector.xml"
               for ins in INSTRUCTIONS)
    out = tmp_path / "jars"
    argv = [expand(a, ARGS).replace("/jars", str(out)) if a.startswith("-DoutputDirectory=") else expand(a, ARGS)
            for a in fetch]
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=600)
    version = ARGS["SPARK_VERSION"]
    assert sorted(p.name.rsplit("-", 1)[0] for p in out.glob("*.jar")) == [
        "commons-pool2", "kafka-clients", "spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13"]
    assert {f"spark-sql-kafka-0-10_2.13-{version}.jar", f"spark-token-provider-kafka-0-10_2.13-{version}.jar"} <= \
        {p.name for p in out.glob("*.jar")}
    runtime = [i for i in INSTRUCTIONS if i.stage == RUNTIME]
    spark_home = next(i.args.split("SPARK_HOME=")[1].split()[0] for i in runtime
                      if i.keyword == "ENV" and "SPARK_HOME=" in i.args)
    (copy,) = [i for i in runtime if i.keyword == "COPY" and i.args.startswith("--from=jars ")]
    assert copy.args.split()[-1].rstrip("/") == f"{spark_home}/jars"
    assert runtime.index(copy) < runtime.index([i for i in runtime if i.keyword == "USER"][-1])


def test_the_wheel_is_installed_with_extras_pyproject_defines():
    installs = [" ".join(c) for c in run_commands(INSTRUCTIONS, RUNTIME) if c[:2] == ["pip", "install"]]
    wheel = [w for c in installs for w in c.split() if "fencewatch-*.whl" in w]
    assert len(wheel) == 1, "the runtime stage installs the wheel the build stage made"
    m = re.search(r"\.whl\)?\[([\w,-]+)\]", wheel[0])
    extras = set(m.group(1).split(",")) if m else set()
    optional = pyproject()["project"].get("optional-dependencies", {})
    assert extras <= set(optional), f"unknown extras {extras - set(optional)}"
    assert "test" not in extras
    assert not re.search(r"(?<!\$\(ls )/tmp/dist/fencewatch-\*\.whl\[", wheel[0]), "a glob followed by [extra] " \
        "is a character class to the shell"


# --------------------------------------------------------------------------- the wheel


def test_build_stage_copies_every_source_the_wheel_is_made_of_and_dockerignore_keeps_them():
    project = pyproject()
    copied = {src for sources, _ in _copies(BUILD) for src in sources}
    needed = {"pyproject.toml", project["project"]["readme"], "LICENSE"}
    needed |= {d.split("/")[0] for d in project["tool"]["setuptools"]["package-dir"].values()}
    assert needed <= copied, f"not copied into the build stage: {sorted(needed - copied)}"
    assert not [p for p in sorted(needed) if _dockerignored(p)], ".dockerignore drops a build input"
    for extra in ("deploy/entrypoint.sh", "deploy/fencewatch_main.py"):
        assert any(extra in sources for sources, _ in _copies(RUNTIME))
        assert not _dockerignored(extra)
    assert _dockerignored(".venv") and _dockerignored(".git") and _dockerignored("state/__pycache__")


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    """The build stage's ``pip wheel`` run on a copy of the build context it copies."""
    ctx = tmp_path_factory.mktemp("context")
    for sources, dest in _copies(BUILD):
        for src in sources:
            target = ctx / dest / Path(src).name if dest.endswith("/") and len(sources) > 1 else ctx / dest
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, ctx / src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy(ROOT / src, ctx / src if dest in ("./", ".") else target)
    dist = tmp_path_factory.mktemp("dist")
    wheel_cmds = [c for c in run_commands(INSTRUCTIONS, BUILD) if c[:2] == ["pip", "wheel"]]
    assert len(wheel_cmds) == 1, "the build stage makes the wheel with one `pip wheel`"
    cmd = [a.replace("/dist", str(dist)) for a in wheel_cmds[0][2:]]
    assert cmd[-1] == "." and "--no-deps" in cmd
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", *cmd], cwd=ctx, check=True,
                   stdout=subprocess.DEVNULL)
    wheels = list(dist.glob("fencewatch-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


@pytest.mark.slow
def test_the_wheel_holds_every_package_and_requires_what_pyproject_says(built_wheel):
    project = pyproject()
    with zipfile.ZipFile(built_wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
        entry_points = z.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert meta["Version"] == project["project"]["version"]
    for package in project["tool"]["setuptools"]["packages"]:
        folder = package.replace(".", "/")
        assert f"{folder}/__init__.py" in names or any(n.startswith(folder + "/") for n in names), package
    required = {str(Requirement(r)) for r in meta.get_all("Requires-Dist") if "extra ==" not in r}
    assert required == {str(Requirement(r)) for r in project["project"]["dependencies"]}
    assert "fencewatch = fencewatch.streaming.cli:console_main" in entry_points
    licence = [n for n in names if ".dist-info/" in n and n.endswith("/LICENSE")]
    assert licence and meta["License-Expression"] == project["project"]["license"] == "Apache-2.0"
    with zipfile.ZipFile(built_wheel) as z:
        assert z.read(licence[0]) == (ROOT / "LICENSE").read_bytes(), "the wheel carries the licence text"


@pytest.mark.slow
def test_the_installed_wheel_runs_fencewatch_help_as_the_image_does(built_wheel, tmp_path):
    """The runtime stage's ``pip install ... fencewatch-*.whl && fencewatch --help``, with the
    dependencies taken from this environment (they are the same pins, checked above)."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(built_wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import fencewatch.streaming.cli as c; print(c.__file__)"],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), "the wheel's copy, not this checkout, answered"
    smoke = [c for c in run_commands(INSTRUCTIONS, RUNTIME) if c and c[0] == "fencewatch"]
    assert smoke, "the runtime stage runs fencewatch once to prove the install"
    args = [a for a in smoke[0][1:] if not a.startswith(">")]
    out = subprocess.run([sys.executable, str(site / "bin" / "fencewatch"), *args], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for command in ("replay", "run", "demo", "simulate", "bridge"):
        assert command in out.stdout


# --------------------------------------------------------------------------- entrypoint and healthcheck


def _entrypoint() -> list[str]:
    ins = [i for i in INSTRUCTIONS if i.keyword == "ENTRYPOINT"]
    assert len(ins) == 1
    import json
    return json.loads(ins[0].args)


def test_entrypoint_runs_fencewatch_by_default():
    entry = _entrypoint()
    assert entry[:2] == ["/usr/bin/tini", "--"], "tini forwards SIGTERM so the query stops between batches"
    assert entry[2] == "/usr/local/bin/fencewatch-entrypoint"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", str(DEPLOY / "entrypoint.sh"), "replay", "--help"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: fencewatch replay" in out.stdout


def test_executor_class_the_entrypoint_starts_is_in_the_image_spark():
    """The executor branch starts Spark's Kubernetes executor backend from $SPARK_HOME/jars."""
    import pyspark
    text = (DEPLOY / "entrypoint.sh").read_text()
    cls = re.search(r"org\.apache\.spark\.scheduler\.cluster\.k8s\.\w+", text).group(0)
    jars = Path(pyspark.__file__).parent / "jars"
    k8s = list(jars.glob("spark-kubernetes_*.jar"))
    assert k8s, "pyspark's jars include spark-kubernetes"
    with zipfile.ZipFile(k8s[0]) as z:
        assert cls.replace(".", "/") + ".class" in z.namelist()


@pytest.mark.spark
def test_entrypoint_executor_branch_runs_the_jvm_on_jemalloc(tmp_path):
    """The executor JVM (real java, Spark's real backend class) maps jemalloc; it is stopped once
    seen (no driver answers at the URL it is given)."""
    import pyspark
    from fencewatch.streaming.runtime.session import jemalloc_path

    assert jemalloc_path("auto"), "make installs libjemalloc2 (Debian)"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {
        "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1", "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "app-test", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "fencewatch-exec-1", "SPARK_JAVA_OPT_0": "-Dfencewatch.test=1"}
    proc = subprocess.Popen(["bash", str(DEPLOY / "entrypoint.sh"), "executor"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        maps = ""
        for _ in range(200):  # bash execs java: same pid; its libraries are mapped at start
            try:
                maps = Path(f"/proc/{proc.pid}/maps").read_text()
                cmdline = Path(f"/proc/{proc.pid}/cmdline").read_text()
            except OSError:
                break
            if "KubernetesExecutorBackend" in cmdline and "libjvm" in maps:
                break
            time.sleep(0.05)
        assert "KubernetesExecutorBackend" in cmdline and "-Dfencewatch.test=1" in cmdline, cmdline
        assert "libjemalloc" in maps
    finally:
        proc.kill()
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.spark
def test_entrypoint_driver_branch_runs_the_main_file_through_spark_submit(tmp_path):
    """What the driver pod runs: ``driver`` + spark-submit arguments -> fencewatch_main.py."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    out = subprocess.run(["bash", str(DEPLOY / "entrypoint.sh"), "driver", "--master", "local[1]",
                          "--conf", "spark.ui.enabled=false", str(DEPLOY / "fencewatch_main.py"),
                          "run", "--checkpoint", str(tmp_path / "cp"), "--print-config"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"checkpoint_location": "%s"' % (tmp_path / "cp") in out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthcheck_passes_against_the_metrics_endpoint_and_fails_without_it():
    """The HEALTHCHECK asks /healthz (liveness): it passes while the job starts or runs, fails
    when nothing listens and when the query has failed (503)."""
    import json

    from fencewatch.sinks.metrics import MetricsConfig
    from fencewatch.sinks.prometheus import MetricsSink

    ins = [i for i in INSTRUCTIONS if i.keyword == "HEALTHCHECK"][0]
    cmd = json.loads(ins.args[ins.args.index("CMD") + 3:].strip())
    assert cmd[0] == "python"
    port = _free_port()
    env = {**os.environ, "FENCEWATCH_SINKS__METRICS_PORT": str(port)}
    check = [sys.executable, *cmd[1:]]
    assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode != 0, "nothing listens yet"
    sink = MetricsSink(MetricsConfig(host="127.0.0.1", port=port))
    sink.start()
    try:
        done = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr  # starting, within the start-up grace
        sink.set_query_state(True)
        assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode == 0
        sink.set_query_state(False, "StreamingQueryException: boom")
        failed = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
        assert failed.returncode != 0 and "503" in failed.stderr
    finally:
        sink.close()
