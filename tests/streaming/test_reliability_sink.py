"""The Kafka sink on the real broker: no record can stop it, and a process killed between
producing a batch and logging it done leaves no duplicate once the batch is written again."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from fencewatch.sinks.kafka import BATCH_HEADER, TRUNCATED, BatchMarker, KafkaOutputs, fit_alert, parse_log
from reliability_harness import read_topic, record_row

pytestmark = [pytest.mark.broker]


def outputs(broker, topics, marker=None, **extra):
    return KafkaOutputs({"bootstrap.servers": broker, **extra.pop("client", {})}, verdicts_topic=topics["verdicts"],
                        alerts_topic=topics["alerts"], dlq_topic=topics["dlq"], alerts_format="json",
                        marker=marker, **extra)


@pytest.fixture
def topics(topic_factory):
    return {"verdicts": topic_factory(2, "verdicts"), "alerts": topic_factory(1, "alerts"),
            "dlq": topic_factory(1, "dlq")}


def alert(i: int, member: str = "m") -> dict:
    return {"alert_id": f"a-{i}", "ts": 1000 + i, "cluster": "c", "group_id": "g", "kind": "DUPLICATE_ASSIGNMENT",
            "severity": "critical", "summary": f"1 partition(s) assigned to {member} are still assigned to x",
            "details": {"member_id": member, "partitions": "t-0"}}


def test_an_alert_over_the_limit_is_cut_flagged_and_written_with_the_rest(broker, topics):
    sink = outputs(broker, topics)
    huge = "m" * 900_000
    lines = [json.dumps({"event_id": f"e{i}", "topic": "t", "partition": 0}) for i in range(100)]
    assert sink.write_batch(0, verdict_lines=lines, alerts=[alert(1), alert(2, huge), alert(3)])
    sink.close()
    got = {a["alert_id"]: a for a in (json.loads(m.value()) for m in read_topic(broker, topics["alerts"], 1.5))}
    assert sorted(got) == ["a-1", "a-2", "a-3"]
    cut = got["a-2"]
    assert set(cut["details"][TRUNCATED].split(",")) == {"summary", "member_id"}
    assert len(json.dumps(cut)) < 600_000 and cut["details"]["member_id"].startswith("mmm")
    assert TRUNCATED not in got["a-1"]["details"]
    assert len(read_topic(broker, topics["verdicts"], 1.0)) == 100


def test_fit_alert_keeps_small_alerts_as_they_are():
    a = alert(7)
    assert fit_alert(a, 10_000) == a
    big = dict(a, details={f"k{i}": "v" * 5_000 for i in range(50)})
    fitted = fit_alert(big, 20_000)
    assert len(json.dumps(fitted)) <= 20_000 and fitted["alert_id"] == "a-7"


def test_records_the_producer_refuses_become_dead_letters_and_the_batch_completes(broker, topics):
    # The producer's own limit at 3 KB: a 5 KB verdict is refused at produce time; a 2 MB verdict
    # is over the sink's record bound; both become dead letters, the other records are delivered.
    sink = outputs(broker, topics, client={"message.max.bytes": "3000"}, max_record_bytes=1_000_000)
    good = [json.dumps({"event_id": f"e{i}"}) for i in range(50)]
    big = json.dumps({"event_id": "big", "member_id": "x" * 5_000})
    huge = json.dumps({"event_id": "huge", "member_id": "x" * 2_000_000})
    assert sink.write_batch(3, verdict_lines=good[:25] + [big, huge] + good[25:])
    sink.close()
    assert len(read_topic(broker, topics["verdicts"], 1.0)) == 50
    dead = read_topic(broker, topics["dlq"], 1.0)
    reasons = sorted(dict(m.headers())["fencewatch.reason"].decode() for m in dead)
    assert len(reasons) == 2 and all(r.startswith("OUTPUT_REJECTED(topic=" + topics["verdicts"]) for r in reasons)
    assert any("OUTPUT_TOO_LARGE" in r for r in reasons) and any("MSG_SIZE_TOO_LARGE" in r for r in reasons)
    assert all(len(m.value()) <= 3_000 for m in dead)  # a refused dead letter is sent as its reason alone
    assert sink.stats["rerouted"] >= 2 and sink.stats["dropped"] == 0


def test_a_full_producer_queue_waits_and_loses_no_verdict(broker, topics):
    """The producer's local queue holds 20 records: most verdict lines meet a full queue, wait for
    deliveries to drain (the careful path) and are all written, once, in order per partition."""
    sink = outputs(broker, topics, client={"queue.buffering.max.messages": "20", "linger.ms": "0"})
    lines = [json.dumps({"event_id": f"e{i}", "topic": "t", "partition": 0}) for i in range(1_000)]
    assert sink.write_batch(4, verdict_lines=lines)
    sink.close()
    got = [json.loads(m.value())["event_id"] for m in read_topic(broker, topics["verdicts"], 1.0)]
    assert sorted(got) == sorted(f"e{i}" for i in range(1_000))
    assert sink.stats["produced"] == 1_000 and sink.stats["rerouted"] == 0


CHILD = r"""
import json, os, signal, sys
from fencewatch.sinks.kafka import BatchMarker, KafkaOutputs
broker, verdicts, alerts, dlq, marker, batch, n, stop_at = sys.argv[1:]
sink = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic=verdicts, alerts_topic=alerts, dlq_topic=dlq,
                    alerts_format="json", marker=BatchMarker(marker))
assert sink.begin(int(batch))
lines = [json.dumps({"event_id": f"b{batch}-{i}"}) for i in range(int(n))]
if stop_at == "after-produce":
    sink.write(verdict_lines=lines, alerts=[{"alert_id": f"a{batch}", "ts": 1, "cluster": "c", "group_id": "g",
               "kind": "K", "severity": "warning", "summary": "s", "details": {}}], dead_letters=[(b"raw", "WHY", "t[0]@1")])
    sink._producer.flush(30)  # every record delivered, the batch not logged done
else:  # mid-produce: half the records delivered
    sink.write(verdict_lines=lines[: int(n) // 2])
    sink._producer.flush(30)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("stop_at", ["after-produce", "mid-produce"])
def test_killed_between_produce_and_commit_no_duplicate(broker, topics, tmp_path, stop_at):
    marker = tmp_path / "sink-log"
    n = 2_000
    ok = outputs(broker, topics, marker=BatchMarker(marker))
    ok.write_batch(6, verdict_lines=[json.dumps({"event_id": f"b6-{i}"}) for i in range(10)])
    ok.close()
    child = subprocess.run([sys.executable, "-c", CHILD, broker, topics["verdicts"], topics["alerts"], topics["dlq"],
                            str(marker), "7", str(n), stop_at], timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert parse_log(marker.read_text()) == {"batch": 7, "status": "pending", "start": parse_log(
        marker.read_text())["start"]}
    # The restarted job writes batch 7 again, as Spark replays it.
    again = outputs(broker, topics, marker=BatchMarker(marker))
    lines = [json.dumps({"event_id": f"b7-{i}"}) for i in range(n)]
    alerts = [{"alert_id": "a7", "ts": 1, "cluster": "c", "group_id": "g", "kind": "K", "severity": "warning",
               "summary": "s", "details": {}}]
    assert again.write_batch(7, verdict_lines=lines, alerts=alerts, dead_letters=[(b"raw", "WHY", "t[0]@1")])
    assert not again.write_batch(7, verdict_lines=lines)  # and a third time: skipped
    again.close()
    got = Counter(json.loads(m.value())["event_id"] for m in read_topic(broker, topics["verdicts"], 1.5))
    batch7 = {k: v for k, v in got.items() if k.startswith("b7-")}
    lost = n - len(batch7)
    duplicated = sum(v - 1 for v in batch7.values())
    alerts_got = Counter(m.key() for m in read_topic(broker, topics["alerts"], 1.0))
    dead = read_topic(broker, topics["dlq"], 1.0)
    record_row(f"sink_killed_{stop_at.replace('-', '_')}",
               load=f"a batch of {n:,} verdicts, 1 alert, 1 dead letter",
               fault=f"SIGKILL {'after every record was delivered, before the batch was logged done' if stop_at == 'after-produce' else 'with half the verdicts delivered'}",
               outcome="batch written again after restart; every record once",
               verdicts=f"{len(batch7):,} of {n:,}", alerts=f"{alerts_got[b'a7']} of 1", lost=lost,
               duplicated=duplicated + max(0, alerts_got[b"a7"] - 1) + max(0, len(dead) - 1), source="any")
    assert lost == 0 and duplicated == 0
    assert got["b6-0"] == 1 and alerts_got[b"a7"] == 1 and len(dead) == 1
    assert all(dict(m.headers())[BATCH_HEADER] == b"7" for m in dead)
