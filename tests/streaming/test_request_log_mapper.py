"""The ``mapInPandas`` mapper of ``run --source request-log``, called as Spark calls it (pandas in,
pandas out) without a Spark session: rows, sequence numbers, dead letters, and membership
left to ``__consumer_offsets`` when both sources are read."""
import json
import sys
from pathlib import Path

import pandas as pd

from fencewatch.streaming.config.settings import Config, StreamingConfig, source_list
from fencewatch.streaming.runtime.request_log_input import COLUMNS, make_request_log_mapper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from test_request_log_judged import ORDERS, scenario  # noqa: E402


def frame(lines):
    return pd.DataFrame({"value": [None if x is None else x.encode() for x in lines], "topic": "rl",
                         "partition": 0, "offset": range(len(lines)), "record_ts": 5})


def run(lines, **kw):
    (out,) = list(make_request_log_mapper({ORDERS: "orders"}, **kw)(iter([frame(lines)])))
    assert list(out.columns) == list(COLUMNS)
    return out


def test_rows_in_line_order_with_dead_letters():
    lines = scenario()[:2] + ["[2026-11-20 09:00:59,000] DEBUG Completed request:{oops} (kafka.request.logger)",
                              None, "an INFO line of another logger"]
    out = run(lines)
    events = [json.loads(v) if b is None else None for v, b in zip(out["value"], out["bad_reason"])]
    assert [e["type"] if e else None for e in events] == ["heartbeat", "member_assignment", "heartbeat",
                                                          "member_assignment", None, None]
    assert list(out["seq"]) == [0, 1, 64, 65, 128, 192] and set(out["source"]) == {"request_log"}
    assert list(out["event_id"])[:2] == ["rl/0/0", "rl/0/0"] and out["coords"][4] == "rl[0]@2"
    assert out["bad_reason"][4] == "MISSING_FIELD(detail=requestHeader.requestApiKey)" and out["bad_reason"][5] == "MISSING_VALUE"
    assert events[3]["assigned"] is None  # unchanged: the group state resolves it


def test_membership_left_to_consumer_offsets_when_combined():
    out = run(scenario(), membership=False)
    types = {json.loads(v)["type"] for v in out["value"]}
    assert types == {"heartbeat", "offset_commit"}


def test_a_classic_groups_lines_are_kept_when_combined():
    """__consumer_offsets records a classic generation at its SyncGroup only: the join phase, the
    leader's assignment and a LeaveGroup's leave come from the request log either way."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
    from request_log_lines import join_group, leave_group, log_line, sync_group

    lines = [log_line(join_group(9, "c", "m-1", 2, leader="m-1", members=[("m-1", None)])),
             log_line(sync_group(5, "c", "m-1", 2, {"m-1": b""})), log_line(leave_group(5, "c", [("m-1", None)]))]
    out = run(scenario() + lines, membership=False)
    types = [json.loads(v)["type"] for v in out["value"]]
    assert set(types) == {"heartbeat", "offset_commit", "classic_generation", "classic_sync", "member_left"}
    assert types[-3:] == ["classic_generation", "classic_sync", "member_left"]


def test_source_lists_validate():
    assert source_list("request-log, consumer-offsets") == ("request-log", "consumer-offsets")
    bad = Config(streaming=StreamingConfig(source="request-log,bogus", log_timezone="Mars/Olympus")).validate()
    assert any("'bogus'" in p for p in bad) and any("Mars/Olympus" in p for p in bad)
    assert Config(streaming=StreamingConfig(source="request-log,consumer-offsets")).validate() == []


def test_chunks_of_lines_give_the_rows_of_line_by_line():
    """The mapper decodes ``BATCH_LINES`` lines per call (``events_many``): the rows are those of
    ``events`` line by line (as it ran before), across chunk ends, with dead letters and nulls."""
    from fencewatch.streaming.ingest.request_log import BATCH_LINES, RequestLogBridge, event_json
    from fencewatch.streaming.runtime.request_log_input import EVENTS_PER_LINE

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from bench_request_log import build

    lines, names = build(20 * BATCH_LINES + 7, seed=17)
    for k in range(0, len(lines), 41):
        lines[k] = None if k % 2 else lines[k][:300]  # nulls and broken lines here and there
    pdf = frame(lines)
    (out,) = list(make_request_log_mapper(names)(iter([pdf])))
    bridge, want = RequestLogBridge(names, carry=False), []
    for offset, line in enumerate(lines):
        eid, coords = f"rl/0/{offset}", f"rl[0]@{offset}"
        if line is None:
            want.append((None, offset * EVENTS_PER_LINE, eid, coords, "MISSING_VALUE"))
            continue
        events = bridge.events(line.encode(), eid, ts=5)
        if bridge.problems:
            _, code, detail = bridge.problems.pop()
            bridge.problems.clear()
            want.append((line.encode(), offset * EVENTS_PER_LINE, eid, coords, f"{code}(detail={detail[:200]})"))
            continue
        want += [(event_json(e), offset * EVENTS_PER_LINE + i, eid, coords, None) for i, e in enumerate(events)]
    got = list(zip(out["value"], out["seq"], out["event_id"], out["coords"], out["bad_reason"]))
    assert got == want
    assert sum(b is not None and b != "MISSING_VALUE" for *_, b in got) >= 10


def test_a_batch_of_lines_without_events_passes_through_spark(spark):
    """A chunk of lines that make no event (another logger's, at the query's 40-row Arrow batches)
    gives no frame: an empty one has float64 columns, which pyspark 4.3 failed to convert
    (``ChunkedArray``), failing the query on a real broker's backlog (docs/fidelity.md)."""
    from fencewatch.streaming.runtime.request_log_input import SCHEMA

    lines = ["an INFO line of another logger"] * 45 + scenario()
    mapper = make_request_log_mapper({ORDERS: "orders"})
    assert all(len(f) for f in mapper(iter([frame(lines[:40]), frame(lines[40:])])))
    expected = run(lines)
    before = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        rows = spark.createDataFrame(frame(lines)).coalesce(1).mapInPandas(mapper, SCHEMA).collect()
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", before)
    assert [bytes(r["value"]) for r in rows] == list(expected["value"])
    assert [r["seq"] for r in rows] == list(expected["seq"])


def test_the_consumer_offsets_mapper_yields_no_empty_frame():
    """Records that make no event (unknown record types are skipped, as Kafka does) give no frame."""
    from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

    unknown = pd.DataFrame({"key": [b"\x00\x63\x00\x01g"] * 3, "value": [b"\x00\x00"] * 3, "topic": "co",
                            "partition": 0, "offset": range(3), "record_ts": 5})
    assert list(make_bridge_mapper({})(iter([unknown]))) == []


def test_at_an_equal_ts_the_request_logs_events_come_before_the_records():
    """The job's two Kafka-side sources met in one millisecond: a request-log line far down its
    topic and a ``__consumer_offsets`` record near the start of its partition. Ordered as the state
    function applies them, (ts, seq), the line's events come first, whatever the offsets (on the
    fence-heavy fidelity runs, records first made 340 and 278 false disagreements, lines first 0
    and 13: docs/decisions.md); at different ts, ts decides."""
    import base64

    from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

    capture = Path(__file__).resolve().parents[1] / "fixtures" / "kafka" / "4.3.1"
    record = next(r for r in map(json.loads, (capture / "consumer-offsets.jsonl").read_text().splitlines())
                  if r["value"] is not None and base64.b64decode(r["key"])[:2] == b"\x00\x08")  # a current assignment
    lines = scenario()[:2]
    rl = make_request_log_mapper({ORDERS: "orders"})(iter([pd.DataFrame(
        {"value": [x.encode() for x in lines], "topic": "rl", "partition": 0, "offset": [9_000_000, 9_000_001],
         "record_ts": 5})]))
    (lines_out,) = list(rl)
    co = make_bridge_mapper({})(iter([pd.DataFrame(
        {"key": [base64.b64decode(record["key"])], "value": [base64.b64decode(record["value"])],
         "topic": "__consumer_offsets", "partition": 0, "offset": [3], "record_ts": [int(lines_out["record_ts"][0])]})]))
    (records_out,) = list(co)
    rows = [(int(ts), int(seq), src) for out in (records_out, lines_out)
            for ts, seq, src in zip(out["record_ts"], out["seq"], out["source"])]
    ts0 = rows[-1][0]
    tied = sorted((r for r in rows if r[0] == ts0), key=lambda r: r[:2])
    assert [src for _, _, src in tied][:1] == ["request_log"] and tied[-1][2] == "consumer_offsets"
