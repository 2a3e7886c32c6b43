"""``fencewatch simulate`` as users run it (through the real console-script entry point)."""

from __future__ import annotations

import json

import fastavro
import pytest

from fencewatch.streaming.commands.simulate import parse_duration_flag, parse_rate, parse_start_ts
from fencewatch.sim.writers import Pacer
from fencewatch.streaming.cli import main


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_events_budget_seed_and_labels(tmp_path, capsys):
    out = tmp_path / "a.jsonl"
    assert main(["simulate", "--profile", "zombie-storm", "--seed", "4", "--events", "3000", "--out", str(out)]) == 0
    events = lines(out)
    assert len(events) == 3000
    assert "events=3000" in capsys.readouterr().err
    again = tmp_path / "b.jsonl"
    assert main(["simulate", "--profile", "zombie-storm", "--seed", "4", "--events", "3000", "--out", str(again),
                 "--quiet"]) == 0
    assert again.read_text() == out.read_text()
    plain = tmp_path / "c.jsonl"
    assert main(["simulate", "--profile", "zombie-storm", "--seed", "4", "--events", "3000", "--out", str(plain),
                 "--no-labels", "--quiet"]) == 0
    assert lines(plain) == [{k: v for k, v in e.items() if k != "truth"} for e in events]


def test_size_knobs_duration_start_and_cluster(tmp_path):
    out = tmp_path / "s.jsonl"
    code = main([
        "simulate", "--groups", "3", "--members-per-group", "2", "--topics", "1", "--partitions-per-topic", "4",
        "--duration", "2m", "--start-ts", "2024-06-01T00:00:00Z", "--cluster", "east", "--set", "eos_fraction=0",
        "--assignment-epochs", "--out", str(out), "--quiet",
    ])
    assert code == 0
    events = lines(out)
    start = 1_717_200_000_000
    assert {e["group_id"] for e in events if "group_id" in e} == {"group-00000", "group-00001", "group-00002"}
    assert all(start <= e["ts"] <= start + 120_000 + 1_000 for e in events)
    assert all(e["cluster"] == "east" for e in events)
    assignments = [e for e in events if e["type"] == "member_assignment"]
    assert assignments and all(len(e["subscribed_topics"]) == 1 for e in assignments)
    assert all("assignment_epochs" in tp for e in assignments for tp in e["assigned"])
    members = {e["member_id"] for e in assignments}
    assert len(members) >= 6


def test_avro_output_is_an_object_container_file(tmp_path):
    out = tmp_path / "e.avro"
    assert main(["simulate", "--format", "avro", "--events", "500", "--seed", "2", "--out", str(out), "--quiet"]) == 0
    json_out = tmp_path / "e.jsonl"
    assert main(["simulate", "--events", "500", "--seed", "2", "--out", str(json_out), "--quiet"]) == 0
    with out.open("rb") as fh:
        records = list(fastavro.reader(fh))
    expected = lines(json_out)
    assert len(records) == 500
    stripped = [{k: v for k, v in r.items() if v is not None} for r in records]
    # Nested optional fields are null in Avro, absent in JSON: compare the top level and the ids.
    assert [r["event_id"] for r in stripped] == [e["event_id"] for e in expected]
    assert [(r["type"], r["ts"]) for r in stripped] == [(e["type"], e["ts"]) for e in expected]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "race_rate=3"], "race_rate is a probability"),
        (["--set", "nope=1"], "unknown knob"),
        (["--groups", "0"], "groups must be >= 1"),
        (["--bootstrap-servers", "127.0.0.1:1", "--out", "x"], "not both"),
        (["--producer-config", "novalue"], "KEY=VALUE"),
    ],
)
def test_bad_options_exit_2_with_a_clear_message(argv, message, capsys):
    assert main(["simulate", "--events", "1", *argv]) == 2
    assert message in capsys.readouterr().err


def test_unwritable_output_exits_1(tmp_path, capsys):
    assert main(["simulate", "--events", "10", "--out", str(tmp_path / "missing" / "x.jsonl")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_list_profiles(capsys):
    assert main(["simulate", "--list-profiles"]) == 0
    out = capsys.readouterr().out
    for name in ("steady", "rolling-restart", "zombie-storm", "eos-heavy", "expiry-hazard", "unclean-election", "mixed"):
        assert f"{name}:" in out


def test_option_parsers():
    assert parse_duration_flag("90") == 90_000
    assert parse_duration_flag("10m") == 600_000 and parse_duration_flag("1.5h") == 5_400_000
    assert parse_duration_flag("250ms") == 250
    assert parse_rate("asap") == ("asap", None)
    assert parse_rate("5000") == ("events", 5000.0)
    assert parse_rate("realtime") == ("realtime", 1.0) and parse_rate("realtime:60") == ("realtime", 60.0)
    assert parse_start_ts("1700000000000") == 1_700_000_000_000
    assert parse_start_ts("2025-01-01T00:00:00") == 1_735_689_600_000
    for parser, bad in ((parse_duration_flag, "ten"), (parse_rate, "fast"), (parse_rate, "0"), (parse_start_ts, "soon")):
        with pytest.raises(Exception):
            parser(bad)


def test_pacer_sleeps_to_hold_the_rate():
    """Pacing logic with an injected clock (no timed assertion)."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(rate=1000, sleep=sleep, clock=lambda: now[0])
    pacer(500, 0)  # 500 events due at t=0.5 s
    assert slept == [0.5]
    pacer(400, 0)  # behind schedule: no sleep
    assert slept == [0.5]
    realtime = Pacer(realtime_speed=10, start_ts=1_000, sleep=sleep, clock=lambda: now[0])
    realtime(0, 11_000)  # 10 simulated seconds at 10x = 1 s of wall time
    assert slept[-1] == pytest.approx(1.0)


def test_unreachable_broker_exits_1(capsys):
    assert main(["simulate", "--events", "10", "--bootstrap-servers", "127.0.0.1:1",
                 "--producer-config", "socket.timeout.ms=1000"]) == 1
    assert "cannot use topics" in capsys.readouterr().err


def test_pacer_calls_on_wait_before_it_sleeps_only():
    now, calls = [0.0], []
    pacer = Pacer(rate=1000, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0],
                  on_wait=lambda: calls.append(now[0]))
    pacer(500, 0)  # ahead of the wall clock: the held records are due
    assert calls == [0.0]
    pacer(400, 0)  # behind: no wait, nothing sent early
    assert calls == [0.0]
