"""A checkpoint written by fencewatch 0.1.0 (commit af6c70b, pickled Spark state), committed in
``tests/fixtures/checkpoints/0.1.0/``: this version refuses it with what to do, ``fencewatch
checkpoint`` shows it and starts a new checkpoint at its committed offsets, and the job on that
new checkpoint reads exactly the records after them."""
from __future__ import annotations

import json
import pickle
import shutil
import time
from pathlib import Path

import pytest

from fencewatch.streaming.cli import main
from fencewatch.streaming.runtime import checkpoint as cp
from fencewatch.streaming.runtime import state_codec as codec
from fencewatch.streaming.runtime.routing import parse_key

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "0.1.0"
COMMITTED = {"fw010-heartbeats": {"0": 36, "1": 31}, "fw010-offsets": {"0": 969, "1": 964}}  # offsets/3


@pytest.fixture
def old(tmp_path) -> Path:
    """A copy of the fixture (commands may write beside it)."""
    return Path(shutil.copytree(FIXTURE / "checkpoint", tmp_path / "old"))


def test_show_says_the_state_is_0_1_0s_pickle(old, capsys):
    assert main(["checkpoint", "show", "--checkpoint", str(old)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["planned"] == 3 and shown["committed"] == 3 and shown["uncommitted"] is False
    assert shown["state_format"].startswith("0.1.0 (pickled Python objects") and "reset-state" in shown["state_format"]
    assert "sink log of fencewatch 0.1.0" in shown["sink_log"]
    assert shown["ends"] == [COMMITTED]


def test_run_refuses_it_before_spark_starts_and_says_what_to_do(old, capsys):
    t0 = time.monotonic()
    assert main(["run", "--checkpoint", str(old), "--bootstrap-servers", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 30  # no Spark session, no broker
    assert f"checkpoint {old} holds Spark state in fencewatch 0.1.0's format (pickled Python objects)" in err
    assert f"fencewatch checkpoint reset-state --checkpoint {old} --to NEW_CHECKPOINT" in err
    assert not (old / "fencewatch-state").exists()  # refused, nothing written into it
    with pytest.raises(cp.CheckpointFormatError, match="0.1.0"):
        cp.ensure_state_format(str(old))


def test_reset_state_starts_a_new_checkpoint_at_the_committed_offsets(old, tmp_path, capsys):
    new = tmp_path / "new"
    assert main(["checkpoint", "reset-state", "--checkpoint", str(old), "--to", str(new)]) == 0
    said = capsys.readouterr().out
    assert "starts after batch 3" in said and f"--checkpoint {new}" in said
    assert cp.start_offsets(str(new)) == COMMITTED
    assert cp.state_format(str(new)) == codec.FORMAT
    cp.ensure_state_format(str(new))  # a query may start on it
    assert json.loads((new / cp.START_OFFSETS_FILE).read_text())["from"] == str(old.resolve())
    assert main(["checkpoint", "show", "--checkpoint", str(new)]) == 0
    assert json.loads(capsys.readouterr().out)["starts_at"] == COMMITTED
    assert cp.starting_offsets_json(COMMITTED, ["fw010-heartbeats", "fw010-offsets"]) == json.dumps(
        COMMITTED, separators=(",", ":"))
    assert cp.starting_offsets_json(COMMITTED, ["fw010-heartbeats", "another"]) is None
    # The old checkpoint is left as it was; a folder in use is not overwritten.
    assert sorted(p.name for p in old.iterdir()) == sorted(p.name for p in (FIXTURE / "checkpoint").iterdir())
    assert main(["checkpoint", "reset-state", "--checkpoint", str(old), "--to", str(new)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert main(["checkpoint", "reset-state", "--checkpoint", str(old)]) == 1


def test_reset_state_of_a_checkpoint_with_nothing_committed_says_so(old, tmp_path, capsys):
    shutil.rmtree(old / "commits")
    assert main(["checkpoint", "reset-state", "--checkpoint", str(old), "--to", str(tmp_path / "new")]) == 1
    assert "no batch was committed" in capsys.readouterr().err


@pytest.mark.spark
def test_every_stored_value_is_a_pickle_the_codec_refuses(spark, old):
    """Spark's state reader on the fixture: 0.1.0 pickled each key's state and hold with its
    class paths, which the modules' move broke (the hold names ``fencewatch.streaming.hold``);
    the codec refuses each value, naming the key and what to do."""
    rows = cp.state_reader(spark).load(str(old)).collect()
    keys = sorted(r.key.key for r in rows)
    assert len([k for k in keys if k.startswith("g\x1f")]) == 3 and any(k.startswith("t\x1f") for k in keys)
    for r in rows:
        blob, held = r.value.groupState.blob, r.value.groupState.pending
        assert codec.value_format(blob) == codec.value_format(held) == "0.1.0"
        pkey = parse_key(r.key.key)
        with pytest.raises(codec.StateFormatError, match="written by fencewatch 0.1.0 .*checkpoint reset-state"):
            codec.decode_state(pkey, blob)
        with pytest.raises(ModuleNotFoundError, match="fencewatch.streaming.hold"):
            pickle.loads(held)


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.slow
def test_the_job_on_the_new_checkpoint_reads_exactly_the_records_after_the_committed_offsets(
        spark, broker, topic_factory, old, tmp_path):
    """The input topics hold, below the committed offsets, records the job must never read (they
    would be dead letters), then a fresh trace. Started at ``earliest`` on the checkpoint
    ``reset-state`` made, the job reads from the committed offsets on: no dead letter, and every
    commit of the trace judged as the local engine judges the trace alone (state starts empty)."""
    from dataclasses import replace

    from confluent_kafka import Producer

    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.sim.profiles import profile
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.brokers.common import create_topics, delete_topics
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.query import drain, query_failure, start_query
    from kafka_helpers import read_all
    from reliability_harness import engine_reference, produce_clock, produce_events

    hb, off = "fw010-heartbeats", "fw010-offsets"
    admin = {"bootstrap.servers": broker}
    delete_topics(admin, [hb, off])  # an external broker may keep them from an earlier run
    create_topics(admin, [hb, off], 2)
    try:
        p = Producer({"bootstrap.servers": broker, "linger.ms": 5})
        for topic, parts in COMMITTED.items():
            for part, n in parts.items():
                for _ in range(n):
                    p.produce(topic, value=b"read before the stop: never again", partition=int(part))
        assert p.flush(30) == 0
        events = simulate(SimConfig(knobs=replace(profile("zombie-storm"), groups=3), seed=11, duration_ms=None,
                                    max_events=1_200, event_id_prefix="e-"))
        produce_events(broker, hb, off, events)
        produce_clock(broker, [hb, off], max(e["ts"] for e in events) + 5_000)
        new = tmp_path / "new"
        assert main(["checkpoint", "reset-state", "--checkpoint", str(old), "--to", str(new)]) == 0
        verdicts_t, alerts_t, dlq_t = topic_factory(2, "verdicts"), topic_factory(1, "alerts"), topic_factory(1, "dlq")
        cfg = cfgmod.load_config(overrides={
            "streaming": {"bootstrap_servers": broker, "heartbeats_topic": hb, "offsets_topic": off,
                          "starting_offsets": "earliest", "checkpoint_location": str(new),
                          "max_offsets_per_trigger": 600, "max_skew_ms": 2_000},
            "sinks": {"verdicts_topic": verdicts_t, "alerts_topic": alerts_t, "dlq_topic": dlq_t}})
        kafka = KafkaOutputs(admin, verdicts_topic=verdicts_t, alerts_topic=alerts_t, dlq_topic=dlq_t,
                             marker=cp.sink_log(spark, str(new)))
        writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
        query = start_query(spark, cfg, writer, trigger="200 milliseconds")
        assert drain(query, cfg, timeout_s=600, writer=writer)
        kafka.close()
        assert query_failure(query) is None
        assert read_all(broker, dlq_t) == []  # nothing below the committed offsets was read
        got = {(v["event_id"], v["topic"], v["partition"]): v["class"]
               for v in (json.loads(m.value()) for m in read_all(broker, verdicts_t))}
        expected = {(v.event_id, v.topic, v.partition): v.cls for v in engine_reference(broker, hb, off, cfg.state).verdicts}
        assert got == expected and len(got) > 100
        assert cp.state_format(str(new)) == codec.FORMAT
    finally:
        delete_topics(admin, [hb, off])
