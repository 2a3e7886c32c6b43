"""``fencewatch checkpoint``: the offsets log as Spark writes it (``v1``, the batch metadata, one
line of offsets per source). The slow test in test_reliability.py runs it on a real query's
checkpoint; these check the arithmetic and the odd inputs."""
from __future__ import annotations

import json

import pytest

from fencewatch.streaming.runtime.checkpoint import bound_planned_batch, plan
from fencewatch.streaming.cli import main

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795446000000,"conf":{"spark.sql.shuffle.partitions":"8"}}'


def write_batch(cp, n, offsets, committed):
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    (cp / "commits").mkdir(parents=True, exist_ok=True)
    (cp / "offsets" / str(n)).write_text("v1\n" + META + "\n" + json.dumps(offsets))
    (cp / "offsets" / f".{n}.crc").write_bytes(b"stale")
    if committed:
        (cp / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_bound_rewrites_only_the_uncommitted_batch(tmp_path):
    cp = tmp_path / "cp"
    write_batch(cp, 0, {"hb": {"0": 100, "1": 100}, "off": {"0": 50}}, True)
    write_batch(cp, 1, {"hb": {"0": 900_100, "1": 150}, "off": {"0": 400_050}}, False)
    assert plan(cp)["records"] == 900_000 + 50 + 400_000
    done = bound_planned_batch(cp, 1_000)
    assert done == {"batch": 1, "before": 1_300_050, "after": 1_000 + 50 + 1_000}
    lines = (cp / "offsets" / "1").read_text().split("\n")
    assert lines[:2] == ["v1", META]
    assert json.loads(lines[2]) == {"hb": {"0": 1_100, "1": 150}, "off": {"0": 1_050}}
    assert not (cp / "offsets" / ".1.crc").exists() and (cp / "offsets" / ".0.crc").exists()
    assert json.loads((cp / "offsets" / "1.unbounded").read_text().split("\n")[2])["hb"]["0"] == 900_100
    assert bound_planned_batch(cp, 1_000)["after"] == 2_050  # idempotent


def test_first_batch_counts_from_the_start_of_the_log(tmp_path):
    cp = tmp_path / "cp"
    write_batch(cp, 0, {"hb": {"0": 300_000}}, False)
    assert bound_planned_batch(cp, 5_000) == {"batch": 0, "before": 300_000, "after": 5_000}


def test_a_cut_batch_loses_its_caught_up_mark_and_a_whole_one_keeps_it(tmp_path):
    """The Kafka source marks a batch planned to the logs' ends (``fencewatch:caught_up``); a batch
    ``bound`` cuts no longer reads to them, one it leaves whole still does."""
    cp = tmp_path / "cp"
    write_batch(cp, 0, {"hb": {"0": 300_000}, "fencewatch:caught_up": True}, False)
    assert plan(cp)["records"] == 300_000
    assert bound_planned_batch(cp, 5_000)["after"] == 5_000
    assert json.loads((cp / "offsets" / "0").read_text().split("\n")[2]) == {"hb": {"0": 5_000}}
    cp = tmp_path / "cp2"
    write_batch(cp, 0, {"hb": {"0": 300}, "fencewatch:caught_up": True}, False)
    assert bound_planned_batch(cp, 5_000)["after"] == 300
    assert json.loads((cp / "offsets" / "0").read_text().split("\n")[2]) == {"hb": {"0": 300},
                                                                             "fencewatch:caught_up": True}


def test_reset_state_of_a_caught_up_batch_carries_its_offsets_not_its_mark(tmp_path, capsys):
    """The Python source's last batch is caught up on a live job: reset-state started from it."""
    cp, new = tmp_path / "cp", tmp_path / "new"
    write_batch(cp, 0, {"hb": {"0": 300, "1": 7}, "fencewatch:caught_up": True}, True)
    assert main(["checkpoint", "reset-state", "--checkpoint", str(cp), "--to", str(new)]) == 0
    seed = json.loads((new / "fencewatch-state" / "start-offsets.json").read_text())
    assert seed["offsets"] == {"hb": {"0": 300, "1": 7}} and seed["batch"] == 0


def test_nothing_to_do_when_the_last_batch_committed(tmp_path, capsys):
    cp = tmp_path / "cp"
    write_batch(cp, 0, {"hb": {"0": 10}}, True)
    assert bound_planned_batch(cp, 5) is None
    assert main(["checkpoint", "bound", "--checkpoint", str(cp)]) == 0
    assert "nothing to bound" in capsys.readouterr().out


def test_odd_inputs_are_clear_errors(tmp_path, capsys):
    assert main(["checkpoint", "show", "--checkpoint", str(tmp_path / "none")]) == 1
    cp = tmp_path / "cp"
    (cp / "offsets").mkdir(parents=True)
    (cp / "offsets" / "0").write_text("v1\n{}\n{not json")
    assert main(["checkpoint", "bound", "--checkpoint", str(cp)]) == 1
    with pytest.raises(SystemExit) as usage:  # refused when the flags are parsed: a usage error
        main(["checkpoint", "bound", "--checkpoint", str(cp), "--max-offsets-per-partition", "0"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "not a streaming checkpoint" in err and "must be > 0" in err


@pytest.mark.spark
def test_sink_log_through_sparks_checkpoint_file_manager(spark, tmp_path):
    """The sink log is written and read through Spark's CheckpointFileManager."""
    from fencewatch.sinks.kafka import log_entry, parse_log
    from fencewatch.streaming.runtime.checkpoint import CheckpointSinkLog

    log = CheckpointSinkLog(spark, str(tmp_path))
    assert log.read() is None
    log.write(log_entry(42, "pending", {"t": {"0": 5}}))
    assert parse_log(log.read()) == {"batch": 42, "status": "pending", "start": {"t": {"0": 5}}}
    log.write(log_entry(42, "done"))
    assert parse_log(log.read())["status"] == "done"
    assert (tmp_path / "fencewatch-sink" / "state.json").exists()


@pytest.mark.spark
def test_local_sink_log_and_sparks_file_manager_read_each_other(spark, tmp_path):
    """A local checkpoint's sink log is written from Python (no Hadoop process per write); a log
    Hadoop wrote before (with its ``.crc``) is read, replaced, and its stale checksum removed, so
    Hadoop reads the new content back instead of failing its checksum."""
    from fencewatch.sinks.kafka import BatchMarker, log_entry, parse_log
    from fencewatch.streaming.runtime.checkpoint import CheckpointSinkLog, sink_log

    hadoop = CheckpointSinkLog(spark, str(tmp_path))
    hadoop.write(log_entry(7, "done"))
    assert (tmp_path / "fencewatch-sink" / ".state.json.crc").exists()
    local = sink_log(spark, f"file://{tmp_path}")
    assert isinstance(local, BatchMarker)
    assert parse_log(local.read())["batch"] == 7
    local.write(log_entry(8, "pending", {"t": {"0": 3}}))
    assert not (tmp_path / "fencewatch-sink" / ".state.json.crc").exists()
    assert parse_log(CheckpointSinkLog(spark, str(tmp_path)).read())["start"] == {"t": {"0": 3}}
    assert sorted(p.name for p in (tmp_path / "fencewatch-sink").iterdir()) == ["state.json"]


def test_local_sink_log_is_written_from_python(tmp_path):
    from fencewatch.sinks.kafka import log_entry, parse_log
    from fencewatch.streaming.runtime.checkpoint import is_local, sink_log

    log = sink_log(None, str(tmp_path / "cp"))  # no Spark call on a local checkpoint
    assert log.read() is None
    assert parse_log(log.read()) == {"batch": -1, "status": "done", "start": {}}
    log.write(log_entry(42, "done"))
    assert json.loads((tmp_path / "cp" / "fencewatch-sink" / "state.json").read_text()) == {
        "format": 1, "batch": 42, "status": "done"}
    assert parse_log(sink_log(None, f"file:{tmp_path}/cp").read())["batch"] == 42
    assert sorted(p.name for p in (tmp_path / "cp" / "fencewatch-sink").iterdir()) == ["state.json"]  # no temp left
    assert [is_local(x) for x in ("cp", "/var/cp", "file:///var/cp", "FILE:/cp", "hdfs://nn/cp", "s3a://b/cp")] == \
        [True, True, True, True, False, False]


@pytest.mark.parametrize("text, says", [
    ('{"batch": 3, "status": "done"}', "sink log of fencewatch 0.1.0"),  # 0.1.0's document
    ('{"format": 2, "batch": 3, "status": "done"}', "sink log of format 2"),
    ('{"format": 1, "batch": "3", "status": "done"}', "unreadable sink log"),
    ('{"format": 1, "batch": 3, "status": "written"}', "unreadable sink log"),
    ("41", "unreadable sink log"),  # the number a marker held before the log
])
def test_a_sink_log_of_another_format_is_a_clear_error(text, says):
    from fencewatch.sinks.kafka import parse_log

    with pytest.raises(ValueError, match=says):
        parse_log(text)
