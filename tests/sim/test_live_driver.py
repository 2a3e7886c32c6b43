"""``fencewatch.sim.live`` without a broker: the wire primitives against Kafka's encodings, the
expectation checks on request-log objects, and the package's import rule."""

from __future__ import annotations

import ast
import json
import uuid
from pathlib import Path

import pytest

from fencewatch.sim.live import wire
from fencewatch.sim.live.driver import SCENARIOS, scenario_names
from fencewatch.sim.live.expect import Expectation, check, load_expectations, read_request_log, rules_of

LIVE = Path(__file__).resolve().parents[2] / "sim" / "live"


# -- wire ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                            (300, b"\xac\x02"), (2**31 - 1, b"\xff\xff\xff\xff\x07")])
def test_unsigned_varint_as_kafka_writes_it(value, encoded):
    """``ByteUtils.writeUnsignedVarint``: 7 bits per byte, low first, high bit = more."""
    assert bytes(wire.Writer().uvarint(value).buf) == encoded
    assert wire.Reader(encoded).uvarint() == value


def test_compact_and_legacy_strings():
    assert bytes(wire.Writer().compact_string(None).buf) == b"\x00"  # null: length 0
    assert bytes(wire.Writer().compact_string("").buf) == b"\x01"  # empty: length + 1 = 1
    assert bytes(wire.Writer().compact_string("ab").buf) == b"\x03ab"
    assert bytes(wire.Writer().legacy_string("ab").buf) == b"\x00\x02ab"  # the header's client id
    assert bytes(wire.Writer().legacy_string(None).buf) == b"\xff\xff"
    r = wire.Reader(b"\x00\x03ab\x01")
    assert (r.compact_string(), r.compact_string(), r.compact_string()) == (None, "ab", "")


def test_uuid_text_is_kafkas_base64url():
    """``Uuid.toString``: URL-safe base64 without padding (22 characters); '-' and '_' where
    standard base64 (confluent-kafka's ``str(Uuid)``) writes '+' and '/'."""
    raw = b"\xfb\xef\xbe" * 5 + b"\xff"  # standard base64: "++++++++++++++++++++/w=="
    assert wire.uuid_to_kafka(raw) == "--------------------_w"
    assert wire.uuid_to_kafka(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID
    assert wire.uuid_from_kafka(wire.uuid_to_kafka(raw)) == raw


def test_offset_commit_v9_body_layout():
    """OffsetCommitRequest v9 (flexible): group, epoch, member, instance, topics by name, each
    partition (index, offset, leader epoch, metadata, tags), tags."""
    body = wire.encode_offset_commit("g", 7, "m", {"t": [(3, 42, -1, None)]})
    assert body == (b"\x02g" + b"\x00\x00\x00\x07" + b"\x02m" + b"\x00"  # instance id null
                    + b"\x02" + b"\x02t" + b"\x02" + b"\x00\x00\x00\x03" + b"\x00" * 7 + b"\x2a"
                    + b"\xff\xff\xff\xff" + b"\x00" + b"\x00" + b"\x00" + b"\x00")


def test_heartbeat_answer_with_and_without_assignment():
    topic = uuid.uuid4().bytes
    w = wire.Writer().int32(0).int16(0).compact_string(None).compact_string("m").int32(5).int32(500)
    w.int8(1).compact_array_len(1).uuid(topic).compact_array_len(2).int32(0).int32(2).no_tags().no_tags().no_tags()
    a = wire.decode_heartbeat(wire.Reader(bytes(w.buf)))
    assert (a.error_code, a.member_id, a.member_epoch, a.assignment) == (0, "m", 5, {topic: (0, 2)})
    w = wire.Writer().int32(0).int16(113).compact_string("stale").compact_string(None).int32(0).int32(0)
    w.int8(-1).no_tags()
    a = wire.decode_heartbeat(wire.Reader(bytes(w.buf)))
    assert (a.error_code, a.error_message, a.assignment) == (113, "stale", None)


# -- expectations --------------------------------------------------------------------------------


def test_rules_of_versions():
    assert rules_of("4.2.2") == ("strict", "any")
    assert rules_of("4.3.1") == ("kip1251", "any")
    assert rules_of("4.4.0") == ("kip1319", "kip1251", "any")
    with pytest.raises(ValueError):
        rules_of("trunk")


def _commit_line(n: int, member: str, offset: int, code: int, *, api: int = 8, cid: int = 1) -> str:
    obj = {"isForwarded": False,
           "requestHeader": {"requestApiKey": api, "requestApiVersion": 9, "correlationId": cid, "clientId": "c"},
           "request": {"groupId": "g", "generationIdOrMemberEpoch": 3, "memberId": member,
                       "topics": [{"name": "t", "partitions": [{"partitionIndex": 0, "committedOffset": offset}]}]},
           "response": {"throttleTimeMs": 0, "topics": [{"name": "t", "partitions": [
               {"partitionIndex": 0, "errorCode": code}]}]}}
    return f"[2026-11-27 10:00:0{n},000] DEBUG Completed request:{json.dumps(obj)} (kafka.request.logger)\n"


def test_check_by_version_and_count():
    lines = [_commit_line(0, "m", 10, 113), _commit_line(1, "m", 11, 113), _commit_line(2, "m", 11, 0),
             "[2026-11-27 10:00:03,000] INFO something else (kafka.server.KafkaServer)\n"]
    objects = read_request_log(lines)
    assert len(objects) == 3
    behind = Expectation("s", "behind", 8, "g", {"strict": ["STALE_MEMBER_EPOCH"], "kip1251": ["NONE"]},
                         match={"request": {"memberId": "m"}, "partition": ["t", 0, 10]})
    retried = Expectation("s", "retried", 8, "g", {"any": ["NONE"]}, count="last",
                          match={"partition": ["t", 0, 11]})
    every = Expectation("s", "every", 8, "g", {"any": ["NONE"]})
    absent = Expectation("s", "absent", 8, "g", {}, count="none", match={"partition": ["t", 0, 12]})
    missing = Expectation("s", "missing", 28, "g", {"any": ["NONE"]})
    on_42 = {r.expectation.case: r.ok for r in check([behind, retried, every, absent, missing], objects, "4.2.2")}
    assert on_42 == {"behind": True, "retried": True, "every": False, "absent": True, "missing": False}
    on_43 = {r.expectation.case: r.ok for r in check([behind], objects, "4.3.1")}
    assert on_43 == {"behind": False}
    # round trip through the JSON lines a run writes
    assert load_expectations([behind.to_json(), retried.to_json()]) == [behind, retried]


def test_scenario_names():
    assert scenario_names("all") == list(SCENARIOS)
    assert scenario_names("zombie,kip1251") == ["zombie", "kip1251"]
    with pytest.raises(ValueError, match="valid: all, coordinator_routing"):
        scenario_names("nope")


def test_sim_live_imports_no_monitor_code():
    """The simulator stays independent of the monitor it tests: standard library,
    confluent_kafka and ``fencewatch.state`` vocabulary only (no ``fencewatch.streaming``)."""
    for path in LIVE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert not name.startswith(("fencewatch.streaming", "fencewatch.sinks", "pyspark")), (path.name, name)
                if name.startswith("fencewatch."):
                    assert name.startswith("fencewatch.state"), (path.name, name)


def test_fence_load_plan():
    """The fence-heavy load's layout (issue 44 item 2), without a broker: every member holds 10
    to 50 partitions, at rest and with a burst in; both protocols, classic eager and cooperative
    with joiners; stalled and replaced members are child processes (SIGSTOP), the auto-commit
    group commits only by auto commit; and the groups are the load's (``fw-<run>-load-g<n>``,
    what bench/fidelity_matrix.py counts as organic)."""
    from fencewatch.sim.live.fence_load import plan

    groups = plan()
    assert [g.index for g in groups] == list(range(len(groups)))
    for g in groups:
        fewest, most = g.per_member()
        assert 10 <= fewest <= most <= 50, (g.role, fewest, most)
    roles = {g.role: g for g in groups}
    assert set(roles) == {"staller", "auto", "static", "scaling", "classic-eager", "classic-coop", "java", "java-classic"}
    assert {roles["java"].protocol, roles["java-classic"].protocol} == {"consumer", "classic"}
    assert all(g.children > 0 for g in groups if g.role in ("staller", "auto", "static", "classic-eager",
                                                             "classic-coop"))
    assert roles["scaling"].burst >= 2 and roles["scaling"].protocol == "consumer"
    assert roles["auto"].conf["enable.auto.commit"] is True and roles["auto"].conf["auto.commit.interval.ms"] < 1000
    assert {roles["classic-eager"].conf["assignor"], roles["classic-coop"].conf["assignor"]} == {
        "range", "cooperative-sticky"}
    assert all(g.burst > 0 for g in groups if g.protocol == "classic")


def test_unknown_load_is_a_value_error():
    from fencewatch.sim.live.driver import run

    with pytest.raises(ValueError, match="valid: steady, fences"):
        run("127.0.0.1:1", [], groups=1, commits=1, load="storm")


def test_after_scenarios_runs_once_the_scenarios_ended_and_holds_the_load(monkeypatch):
    """The step after the scenarios (the fidelity harness's coordinator move) starts only when
    every scenario has ended, the load runs until it returns too, and its failure is reported like
    a scenario's. No broker: a scenario and a load of our own."""
    import threading
    import time

    from fencewatch.sim.live import driver

    order: list[str] = []
    scenario_done = threading.Event()

    def scenario(ctx):
        time.sleep(0.3)
        order.append("scenario")
        scenario_done.set()

    class FakeLoad:
        committed = 0

        def __init__(self, ctx, **kw):
            pass

        def run_until_done(self, others_done):
            while not others_done():
                self.committed += 1
                time.sleep(0.01)
            order.append("load")

    def after(load):
        assert scenario_done.is_set() and isinstance(load, FakeLoad)
        seen = load.committed
        while load.committed < seen + 5:  # the load goes on meanwhile
            time.sleep(0.01)
        order.append("after")

    monkeypatch.setattr(driver, "_registry", lambda: {"s": scenario})
    monkeypatch.setattr(driver, "SCENARIOS", ("s",))
    import fencewatch.sim.live.load as load_module
    monkeypatch.setattr(load_module, "Load", FakeLoad)
    result = driver.run("127.0.0.1:1", ["s"], groups=1, commits=1, after_scenarios=after)
    assert order == ["scenario", "after", "load"] and not result.failed

    def failing(load):
        raise RuntimeError("no node to restart")

    result = driver.run("127.0.0.1:1", ["s"], groups=1, commits=1, after_scenarios=failing)
    assert result.failed["after_scenarios"] == "RuntimeError: no node to restart"
