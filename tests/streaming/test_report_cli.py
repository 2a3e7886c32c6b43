"""``fencewatch report``'s command line: clear errors for what it cannot do, time range flags."""
from __future__ import annotations

import json

import pytest

from fencewatch.streaming.cli import main
from fencewatch.streaming.commands.report import parse_time
from fencewatch.streaming.config.settings import ConfigError

T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z


@pytest.mark.parametrize("args, message", [
    ([], "nothing to read"),
    (["--verdicts-topic", "v"], "need --bootstrap-servers"),
    (["--bootstrap-servers", "127.0.0.1:1"], "needs --verdicts-topic"),
    (["x.jsonl", "--from", "yesterday-ish"], "--from 'yesterday-ish'"),
    (["x.jsonl", "--broker-policy", "lenient"], "unknown policy"),
])
def test_errors_are_one_line_and_exit_2(args, message, capsys, tmp_path):
    assert main(["report", *args, "--out", str(tmp_path / "r.html")]) == 2
    assert message in capsys.readouterr().err


def test_times_are_epoch_ms_or_iso_8601():
    assert parse_time(str(T0), "--from") == T0
    assert parse_time("2025-01-01T00:00:00Z", "--from") == T0
    assert parse_time("2025-01-01 01:00:00+01:00", "--from") == T0
    assert parse_time("2025-01-01T00:00:00", "--from") == T0  # no offset: UTC
    with pytest.raises(ConfigError):
        parse_time("noon", "--to")


def test_range_flags_keep_the_records_inside(tmp_path, capsys):
    lines = [{"event_id": str(i), "ts": T0 + i * 60_000, "cluster": "default", "group_id": "g", "member_id": "m",
              "kind": "commit", "strict": "STALE_MEMBER_EPOCH", "member_revocation": "NONE",
              "assignment_epoch_check": "NONE", "kip1251": "NONE", "class": "avoidable", "unsafe": False,
              "broker_error": None, "model_agrees": None, "warming_up": False} for i in range(10)]
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    assert main(["report", str(tmp_path / "v.jsonl"), "--from", "2025-01-01T00:02:00Z", "--to", str(T0 + 5 * 60_000),
                 "--out", str(tmp_path / "r.html"), "--json", str(tmp_path / "s.json")]) == 0
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["totals"]["avoidable"]["kip1251"]["requests"] == 4  # minutes 2, 3, 4, 5
    assert s["inputs"][0] == {"kind": "verdicts file", "name": str(tmp_path / "v.jsonl"), "records": 11,
                                   "bad": 1, "outside_range": 6}
    assert (s["range"]["from"], s["range"]["to"]) == ("2025-01-01T00:02:00Z", "2025-01-01T00:05:00Z")
    assert "2025-01-01T00:02:00Z to 2025-01-01T00:05:00Z" in capsys.readouterr().out
