"""Bad input ends in one line and an exit code, never a traceback (issue 46).

Each row feeds one bad value to a command and names what the one error line must say. None
needs a broker, Spark or Grafana: every value is checked before anything starts (the Kafka
addresses below are closed loopback ports, never reached). Most rows run in-process through
``cli.main``; the issue's own four, and one per command, run the installed console script in
a subprocess, which is what proves no traceback reaches a terminal.

Exit codes, the project's convention: 2 for a usage or configuration error (argparse's code,
``cli._run``'s for ConfigError); ``doctor`` reports a configuration that does not load as its
first FAIL line on stdout and exits 1, as for any FAIL; ``grafana push`` and ``checkpoint`` exit
1 on what they cannot do.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fencewatch.streaming.cli import main
from fencewatch.streaming.config import logsetup

EXE = Path(sys.executable).with_name("fencewatch")
CLOSED = "127.0.0.1:1"  # a loopback port nothing listens on

#: files a row may name as {name}, written under tmp_path
FILES = {
    "unclosed.yaml": "streaming:\n  kafka: [a, b\n",
    "tab.yaml": "streaming:\n\tbootstrap_servers: x:1\n",
    "broken.json": '{"streaming": {',
    "list.json": "[1, 2]",
    "section.yaml": "streaming: [1]\n",
    "unknown.yaml": "streams:\n  source: events\n",
    "key.yaml": "streaming:\n  bootstrap_server: x:1\n",
    "string.yaml": "streaming:\n  bootstrap_servers: [a, b]\n",
    "skew.yaml": "streaming:\n  max_skew_ms: two seconds\n",
    "port.yaml": "sinks:\n  metrics_port: 70000\n",
}

# (id, argv, environment, exit code, what the line must name)
ROWS = [
    ("yaml-unclosed", ["run", "--config", "{unclosed.yaml}", "--print-config"], {}, 2, "unclosed.yaml:3:1"),
    ("yaml-tab", ["run", "--config", "{tab.yaml}", "--print-config"], {}, 2, "tab.yaml:2:1"),
    ("json-broken", ["run", "--config", "{broken.json}", "--print-config"], {}, 2, "broken.json:1:16"),
    ("json-not-mapping", ["run", "--config", "{list.json}", "--print-config"], {}, 2, "top level must be a mapping"),
    ("section-not-mapping", ["run", "--config", "{section.yaml}", "--print-config"], {}, 2, "'streaming' must be"),
    ("unknown-section", ["run", "--config", "{unknown.yaml}", "--print-config"], {}, 2, "unknown section 'streams'"),
    ("unknown-key", ["run", "--config", "{key.yaml}", "--print-config"], {}, 2, "streaming.bootstrap_server"),
    ("list-for-string", ["run", "--config", "{string.yaml}", "--print-config"], {}, 2,
     "streaming.bootstrap_servers: expected a string"),
    ("file-duration", ["run", "--config", "{skew.yaml}", "--print-config"], {}, 2, "streaming.max_skew_ms"),
    ("file-port", ["run", "--config", "{port.yaml}", "--print-config"], {}, 2, "sinks.metrics_port"),
    ("missing-file", ["run", "--config", "{tmp}/nope.yaml", "--print-config"], {}, 2, "nope.yaml"),
    ("port-flag", ["run", "--metrics-port", "99999", "--print-config"], {}, 2, "--metrics-port"),
    ("port-not-number", ["run", "--metrics-port", "http", "--print-config"], {}, 2, "--metrics-port"),
    ("port-env", ["run", "--print-config"], {"FENCEWATCH_SINKS__METRICS_PORT": "70000"}, 2, "sinks.metrics_port"),
    ("offsets-unclosed", ["run", "--starting-offsets", '{"t":{"0":', "--print-config"], {}, 2,
     "streaming.starting_offsets"),
    ("offsets-partition", ["run", "--starting-offsets", '{"t":{"x":1}}', "--print-config"], {}, 2, "partition 'x'"),
    ("offsets-value", ["run", "--starting-offsets", '{"t":{"0":-3}}', "--print-config"], {}, 2, "t[0]"),
    ("offsets-word", ["run", "--starting-offsets", "newest", "--print-config"], {}, 2, "'newest'"),
    ("security-protocol", ["run", "-X", "security.protocol=SASL_SSLX", "--print-config"], {}, 2, "SASL_SSLX"),
    ("kafka-unknown-property", ["run", "-X", "no.such.property=1", "--print-config"], {}, 2, "no.such.property"),
    ("kafka-env", ["run", "--print-config"], {"FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM": "PLAINX",
                                             "FENCEWATCH_STREAMING__KAFKA__SECURITY_PROTOCOL": "sasl_plaintext"},
     2, "PLAINX"),
    ("x-without-value", ["run", "-X", "security.protocol", "--print-config"], {}, 2, "-X 'security.protocol'"),
    ("brokers-port", ["run", "--bootstrap-servers", "kafka:99092", "--print-config"], {}, 2, "kafka:99092"),
    ("brokers-no-port", ["run", "--bootstrap-servers", "kafka", "--print-config"], {}, 2, "'kafka'"),
    ("trigger", ["run", "--trigger", "5 parsecs", "--print-config"], {}, 2, "streaming.trigger_interval"),
    ("max-skew", ["run", "--max-skew", "abc", "--print-config"], {}, 2, "streaming.max_skew_ms"),
    ("warmup", ["run", "--warmup", "1y", "--print-config"], {}, 2, "state.warmup_ms"),
    ("max-offsets", ["run", "--max-offsets-per-trigger", "0", "--print-config"], {}, 2, "--max-offsets-per-trigger"),
    ("source", ["run", "--source", "events,nope", "--print-config"], {}, 2, "'nope'"),
    ("policy", ["run", "--broker-policy", "lenient", "--print-config"], {}, 2, "'lenient'"),
    ("spark-conf-not-spark", ["run", "--conf", "driver.memory=4g", "--print-config"], {}, 2, "'driver.memory'"),
    ("spark-conf-owned", ["run", "--conf", "spark.master=local", "--print-config"], {}, 2, "--spark-master"),
    ("input-format", ["run", "--input-format", "protobuf"], {}, 2, "--input-format"),
    ("unknown-flag", ["run", "--no-such-flag", "--print-config"], {}, 2, "--no-such-flag"),
    ("doctor-security-protocol", ["doctor", "-X", "security.protocol=SASL_SSLX"], {}, 1, "SASL_SSLX"),
    ("doctor-port-env", ["doctor"], {"FENCEWATCH_SINKS__METRICS_PORT": "99999"}, 1, "sinks.metrics_port"),
    ("doctor-yaml", ["doctor", "--config", "{unclosed.yaml}"], {}, 1, "unclosed.yaml:3:1"),
    ("doctor-port-flag", ["doctor", "--metrics-port", "99999"], {}, 2, "--metrics-port"),
    ("doctor-timeout", ["doctor", "--timeout", "soon"], {}, 2, "--timeout"),
    ("doctor-lines", ["doctor", "--lines", "0"], {}, 2, "--lines"),
    ("bridge-port", ["bridge", "--bootstrap-servers", CLOSED, "--metrics-port", "65536"], {}, 2, "--metrics-port"),
    ("bridge-brokers", ["bridge", "--bootstrap-servers", "127.0.0.1:99999"], {}, 2, "127.0.0.1:99999"),
    ("bridge-security-protocol", ["bridge", "--bootstrap-servers", CLOSED, "-X", "security.protocol=SASL_SSLX"],
     {}, 2, "SASL_SSLX"),
    ("bridge-interval", ["bridge", "--partition-poll-interval", "often"], {}, 2, "--partition-poll-interval"),
    ("bridge-missing-file", ["bridge", "--from-file", "{tmp}/nope.bin"], {}, 2, "nope.bin"),
    ("report-nothing", ["report"], {}, 2, "nothing to read"),
    ("report-from", ["report", "--from", "yesterday", "{tmp}/v.jsonl"], {}, 2, "--from 'yesterday'"),
    ("report-missing-file", ["report", "{tmp}/nope.jsonl"], {}, 2, "nope.jsonl"),
    ("report-topics-without-brokers", ["report", "--verdicts-topic", "v"], {}, 2, "--bootstrap-servers"),
    ("report-security-protocol", ["report", "--bootstrap-servers", CLOSED, "--verdicts-topic", "v", "-X",
                                  "security.protocol=SASL_SSLX"], {}, 2, "SASL_SSLX"),
    ("groups-no-topic", ["groups", "--bootstrap-servers", CLOSED], {}, 2, "--groups-topic"),
    ("groups-security-protocol", ["groups", "--bootstrap-servers", CLOSED, "--groups-topic", "g", "-X",
                                  "security.protocol=SASL_SSLX"], {}, 2, "SASL_SSLX"),
    ("groups-format", ["groups", "--groups-topic", "g", "--format", "csv"], {}, 2, "--format"),
    ("replay-missing-file", ["replay", "{tmp}/nope.jsonl"], {}, 2, "nope.jsonl"),
    ("replay-engine", ["replay", "x.jsonl", "--engine", "flink"], {}, 2, "--engine"),
    ("simulate-rate", ["simulate", "--rate", "fast"], {}, 2, "--rate"),
    ("simulate-brokers", ["simulate", "--bootstrap-servers", "127.0.0.1:99999", "--events", "3"], {}, 2,
     "127.0.0.1:99999"),
    ("checkpoint-bound", ["checkpoint", "bound", "--checkpoint", "{tmp}", "--max-offsets-per-partition", "-5"],
     {}, 2, "--max-offsets-per-partition"),
    ("checkpoint-missing", ["checkpoint", "show", "--checkpoint", "{tmp}/nope"], {}, 1, "not a streaming checkpoint"),
    ("grafana-bad-port", ["grafana", "push", "--url", "http://127.0.0.1:99999"], {}, 1, "127.0.0.1:99999"),
    ("grafana-not-url", ["grafana", "push", "--url", "grafana.example.com"], {}, 1, "invalid Grafana URL"),
]

#: run in a subprocess through the installed script: the issue's four, and one per other command
SUBPROCESS = {"yaml-unclosed", "json-broken", "doctor-security-protocol", "doctor-port-flag", "bridge-port",
              "report-nothing", "grafana-bad-port", "checkpoint-bound", "groups-no-topic"}


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    out = []
    for arg in argv:
        for name in FILES:
            arg = arg.replace("{%s}" % name, str(tmp_path / name))
        out.append(arg.replace("{tmp}", str(tmp_path)))
    return out


@pytest.fixture
def quiet_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("FENCEWATCH_")]:
        monkeypatch.delenv(name)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield monkeypatch
    root.handlers[:], root.level = saved
    logsetup.configure("WARNING")


def _in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _error_lines(command: str, rc: int, out: str, err: str) -> list[str]:
    """The error lines: stderr's, or for doctor the FAIL lines of its report (stdout)."""
    if command == "doctor" and rc == 1:
        return [line for line in out.splitlines() if line.startswith("FAIL")]
    return [line for line in err.splitlines() if line.strip()]


def test_the_table_has_the_issues_rows_and_more_than_twenty_five():
    assert len(ROWS) >= 25 and len({r[0] for r in ROWS}) == len(ROWS)
    commands = {r[1][0] for r in ROWS}
    assert {"run", "doctor", "bridge", "report", "replay", "simulate", "checkpoint", "grafana", "groups"} <= commands


@pytest.mark.parametrize("case, argv, env, rc, needle", [r for r in ROWS if r[0] not in SUBPROCESS],
                         ids=[r[0] for r in ROWS if r[0] not in SUBPROCESS])
def test_bad_input_is_one_line(case, argv, env, rc, needle, tmp_path, capsys, quiet_env):
    for name, value in env.items():
        quiet_env.setenv(name, value)
    got, out, err = _in_process(_argv(argv, tmp_path), capsys)
    lines = _error_lines(argv[0], got, out, err)
    assert "Traceback" not in out + err
    assert got == rc, (out, err)
    assert len(lines) == 1, lines
    assert needle in lines[0]


@pytest.mark.parametrize("case, argv, env, rc, needle", [r for r in ROWS if r[0] in SUBPROCESS],
                         ids=[r[0] for r in ROWS if r[0] in SUBPROCESS])
def test_bad_input_is_one_line_from_the_console_script(case, argv, env, rc, needle, tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    proc = subprocess.run([str(EXE), *_argv(argv, tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**environ, **env}, cwd=tmp_path)
    lines = _error_lines(argv[0], proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert len(lines) == 1, lines
    assert needle in lines[0]
    if argv[0] == "doctor" and rc == 1:
        assert proc.stderr.strip() == "" and "OK    config" not in proc.stdout  # never "loads" first


def test_a_yaml_error_names_where_the_bracket_was_opened(tmp_path, capsys, quiet_env):
    rc, _, err = _in_process(_argv(["run", "--config", "{unclosed.yaml}", "--print-config"], tmp_path), capsys)
    assert rc == 2 and "<unicode string>" not in err
    assert "begun at line 2, column 10" in err


def test_grafana_push_without_url_says_so_in_one_line(capsys, quiet_env):
    """No URL anywhere: the default (127.0.0.1:3000) is tried; nothing listens on it here, so the
    line says why in a few words and how to give one (a port that is free is made sure of first)."""
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 3000)) == 0:
            pytest.skip("something listens on 127.0.0.1:3000")
    rc, _, err = _in_process(["grafana", "push", "--timeout", "2"], capsys)
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, lines
    assert "Connection refused" in lines[0] and "--url" in lines[0]
    assert "urllib3" not in lines[0] and "object at 0x" not in lines[0]
