"""``fencewatch replay`` as a user runs it: the console script on a file."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.sinks.jsonl import alert_json
from fencewatch.state.model import Alert
from fencewatch.streaming.cli import main
from fencewatch.streaming.runtime.replay import sorted_alerts

TRACE = [
    {"type": "member_assignment", "ts": 1000, "group_id": "g1", "member_id": "A", "member_epoch": 1,
     "assigned": [{"topic": "orders", "partitions": [0, 1]}]},
    {"type": "member_assignment", "ts": 1010, "group_id": "g1", "member_id": "A", "member_epoch": 2,
     "assigned": [{"topic": "orders", "partitions": [0, 1]}]},
    {"type": "offset_commit", "ts": 1020, "group_id": "g1", "member_id": "A", "member_epoch": 1,
     "offsets": [{"topic": "orders", "partition": 0, "offset": 5}, {"topic": "orders", "partition": 1, "offset": 7}],
     "error_code": 113},
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "events.jsonl"
    lines = [json.dumps(e) for e in TRACE]
    lines.insert(1, "this is not json")
    lines.append(json.dumps({"type": "offset_commit", "ts": 5}))
    p.write_text("\n".join(lines) + "\n")
    return p


def test_replay_writes_verdicts_and_alerts(trace, tmp_path, capsys, caplog):
    out, alerts = tmp_path / "v.jsonl", tmp_path / "a.jsonl"
    assert main(["replay", str(trace), "--out", str(out), "--alerts", str(alerts)]) == 0
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(v["partition"], v["class"], v["strict"], v["kip1251"], v["model_agrees"]) for v in verdicts] == [
        (0, "avoidable", "STALE_MEMBER_EPOCH", "NONE", True), (1, "avoidable", "STALE_MEMBER_EPOCH", "NONE", True)]
    assert verdicts[0]["event_id"] == "3"  # 0-based line number (the bad line counts)
    assert list(verdicts[0]) == ["event_id", "ts", "cluster", "group_id", "member_id", "kind", "client_epoch",
                                 "broker_epoch", "topic", "partition", "assignment_epoch", "revocation_epoch",
                                 "strict", "member_revocation", "assignment_epoch_check", "kip1251", "class",
                                 "unsafe", "owner_member_id", "broker_error", "model_agrees", "warming_up"]
    (alert,) = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert alert["kind"] == "AVOIDABLE_FENCING" and len(alert["alert_id"]) == 32
    assert "line 2: INVALID_JSON" in caplog.text
    assert "line 5: MISSING_FIELD(type=offset_commit, field=group_id)" in caplog.text
    assert "2 bad lines" in capsys.readouterr().err


def test_replay_console_script_twice_same_bytes(trace, tmp_path):
    exe = Path(sys.executable).with_name("fencewatch")
    runs = []
    for i in range(2):
        res = subprocess.run([str(exe), "replay", str(trace), "--alerts", str(tmp_path / f"a{i}.jsonl"), "--quiet"],
                             capture_output=True)
        assert res.returncode == 0, res.stderr
        runs.append((res.stdout, (tmp_path / f"a{i}.jsonl").read_bytes()))
    assert runs[0] == runs[1] and runs[0][0].count(b"\n") == 2


def test_print_config_redacts_and_validates(trace, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FENCEWATCH_STATE__WARMUP_MS", "45s")
    assert main(["replay", str(trace), "--print-config", "--expiry-warning", "30m"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["state"]["warmup_ms"] == 45_000 and cfg["state"]["expiry_warning_ms"] == 1_800_000
    assert main(["replay", str(trace), "--broker-policy", "lenient"]) == 2
    assert "unknown policy 'lenient'; valid: strict, member_revocation, assignment_epoch, kip1251" in capsys.readouterr().err


def test_console_script_flushes_everything_before_its_fast_exit(trace, tmp_path):
    # The script exits without interpreter teardown after a local replay: stdout, the files and
    # the summary on stderr must all be complete by then.
    exe = Path(sys.executable).with_name("fencewatch")
    to_stdout = subprocess.run([str(exe), "replay", str(trace)], capture_output=True)
    to_file = subprocess.run([str(exe), "replay", str(trace), "--out", str(tmp_path / "v.jsonl")], capture_output=True)
    assert to_stdout.returncode == to_file.returncode == 0
    assert to_stdout.stdout == (tmp_path / "v.jsonl").read_bytes() and to_stdout.stdout.count(b"\n") == 2
    assert b"2 verdicts, 1 alerts, 2 bad lines" in to_stdout.stderr
    assert b"line 2: INVALID_JSON" in to_file.stderr  # the log record, through logging's handler


def test_missing_input_is_a_one_line_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "absent.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"fencewatch: No such file or directory: {tmp_path / 'absent.jsonl'}"


def test_command_table_names_what_each_module_registers():
    """``cli`` imports only the named command's module; its table must match what they register."""
    import argparse
    import importlib

    from fencewatch.streaming import cli

    for module in set(cli._COMMAND_MODULES.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert {n for n, m in cli._COMMAND_MODULES.items() if m == module} == set(sub.choices), module
    everything = cli.build_parser()._subparsers._group_actions[0].choices
    assert set(everything) == set(cli._COMMAND_MODULES) and "replay" in everything
    assert set(cli.build_parser(["--log-level", "INFO", "bridge", "--help"])._subparsers._group_actions[0].choices) \
        == {"bridge"}


def test_replay_does_not_import_the_other_commands(trace, tmp_path):
    code = ("import sys; from fencewatch.streaming.cli import main; "
            f"rc = main(['replay', {str(trace)!r}, '--out', {str(tmp_path / 'v.jsonl')!r}, '--quiet']); "
            "print(sorted(m for m in sys.modules if m.startswith(('fencewatch.streaming.commands.bridge', 'fencewatch.sim', "
            "'fencewatch.streaming.runtime.query', 'fencewatch.streaming.commands.run', 'fencewatch.sinks.grafana')))); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(Alert, st.sampled_from(["a1", "a2", "a3"]), st.integers(0, 3), st.just("default"),
                          st.just("g"), st.sampled_from(["ZOMBIE_COMMIT", "OFFSETS_EXPIRED"]),
                          st.just("warning"), st.sampled_from(["x", "y", "z"])), max_size=12))
def test_alerts_sorted_by_time_id_and_text(alerts):
    """Replay's alert order (ts, alert id, then the rendered text where both tie) is what sorting
    on all three gives, also when ids tie (the text is rendered only then)."""
    assert sorted_alerts(alerts) == sorted(alerts, key=lambda a: (a.ts, a.alert_id, alert_json(a)))
