"""Not in ``make bench``: the verdict sink's write-ahead log against a Kafka transaction per
micro-batch, on a broker that honours ``read_committed`` (Apache Kafka; Tansu returns aborted
records to ``read_committed`` readers: docs/reliability.md).

The same verdict lines (``replay --engine local`` of a ``simulate`` trace) are written in batches
of N lines, rounds alternating between the modes (this host's speed drifts):

- ``none``: ``KafkaOutputs`` without a sink log (produce, flush): the floor;
- ``log``: ``KafkaOutputs`` with its sink log on a local disk, as ``fencewatch run`` writes it
  (``pending`` + end offsets, produce, flush, ``done``);
- ``txn``: :class:`TxnOutputs`, built only as far as this measurement needs: one transaction per
  batch, the batch id committed in the same transaction as the offset of a group of its own
  (``send_offsets_to_transaction``), read back with ``committed()`` to skip a batch already
  written; no sink log, no read-back after a crash.

Then what a crash does to each reader of a ``txn`` sink: a child process SIGKILLed with half a
transaction produced, and how long a ``read_committed`` reader cannot pass it (until the next
``init_transactions`` with the same id aborts it, or ``transaction.timeout.ms``).

    python bench/ab_txn_sink.py --bootstrap HOST:PORT [--events 50000] [--batches 20000,1000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCEWATCH = str(Path(sys.executable).parent / "fencewatch")

from fencewatch.sinks.kafka import BATCH_HEADER, BatchMarker, KafkaOutputs  # noqa: E402


class TxnOutputs(KafkaOutputs):
    """A transactional verdict sink, as far as the measurement needs: ``begin`` skips a batch
    whose id the group ``state_group`` has committed (in the transaction that wrote it), else opens
    a transaction; ``commit`` flushes, commits ``batch_id + 1`` as that group's offset of the
    verdicts topic's partition 0, and commits the transaction."""

    def __init__(self, client: dict, *, transactional_id: str, state_group: str, **kw):
        from confluent_kafka import Consumer

        super().__init__({**client, "transactional.id": transactional_id}, marker=None, **kw)
        self._producer.init_transactions(60)  # fences an older instance, aborts its open transaction
        self._state = Consumer({**client, "group.id": state_group, "enable.auto.commit": "false",
                                "isolation.level": "read_committed"})
        self._group = self._state.consumer_group_metadata()
        self.last_written = self._last_committed()

    def _last_committed(self) -> int:
        from confluent_kafka import TopicPartition

        (tp,) = self._state.committed([TopicPartition(self.verdicts_topic, 0)], timeout=30)
        return tp.offset - 1 if tp.offset >= 0 else -1

    def begin(self, batch_id: int) -> bool:
        if batch_id <= self.last_written:
            return False
        self._batch = batch_id
        self._headers = [(BATCH_HEADER, str(batch_id).encode())]
        self._retry.clear()
        self._rejected.clear()
        self._producer.begin_transaction()
        return True

    def commit(self, batch_id: int) -> None:
        from confluent_kafka import TopicPartition

        try:
            self._flush(batch_id)
            self._producer.send_offsets_to_transaction([TopicPartition(self.verdicts_topic, 0, batch_id + 1)],
                                                       self._group, 30)
            self._producer.commit_transaction(60)
        except Exception:
            self._producer.abort_transaction(60)
            raise
        self.last_written = batch_id

    def close(self) -> None:
        super().close()
        self._state.close()


# --------------------------------------------------------------------------- inputs and topics

def verdict_lines(events: int, work: Path) -> list[bytes]:
    """The verdict lines of ``replay --engine local`` on ``simulate --profile mixed --groups 50 --seed 5``."""
    trace, out = work / "events.jsonl", work / "verdicts.jsonl"
    subprocess.run([FENCEWATCH, "simulate", "--profile", "mixed", "--groups", "50", "--seed", "5", "--events",
                    str(events), "--out", str(trace), "--quiet"], check=True)
    subprocess.run([FENCEWATCH, "replay", str(trace), "--out", str(out), "--quiet"], check=True)
    return out.read_bytes().splitlines()


def topics(bootstrap: str) -> dict:
    from fencewatch.streaming.brokers.common import create_topics

    tag = uuid.uuid4().hex[:8]
    names = {"verdicts": f"ab-{tag}.verdicts", "alerts": f"ab-{tag}.alerts", "dlq": f"ab-{tag}.dlq"}
    create_topics({"bootstrap.servers": bootstrap}, [names["verdicts"]], 4)
    create_topics({"bootstrap.servers": bootstrap}, [names["alerts"], names["dlq"]], 1)
    return names


def sink(mode: str, bootstrap: str, names: dict, work: Path):
    kw = dict(verdicts_topic=names["verdicts"], alerts_topic=names["alerts"], dlq_topic=names["dlq"],
              alerts_format="json")
    client = {"bootstrap.servers": bootstrap}
    if mode == "txn":
        return TxnOutputs(client, transactional_id=f"fencewatch-{names['verdicts']}",
                          state_group=f"fencewatch-sink-{names['verdicts']}", **kw)
    marker = BatchMarker(work / f"{names['verdicts']}.json") if mode == "log" else None
    return KafkaOutputs(client, marker=marker, **kw)


def run_mode(mode: str, bootstrap: str, lines: list[bytes], batch: int, work: Path) -> dict:
    """Every line once, in batches of ``batch`` lines: seconds per batch and lines/s overall."""
    names = topics(bootstrap)
    t_open = time.perf_counter()
    out = sink(mode, bootstrap, names, work)
    opened = time.perf_counter() - t_open
    per_batch = []
    t0 = time.perf_counter()
    for i, start in enumerate(range(0, len(lines), batch)):
        t = time.perf_counter()
        assert out.write_batch(i, verdict_lines=lines[start:start + batch])
        per_batch.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    out.close()
    return {"mode": mode, "batch": batch, "batches": len(per_batch), "open_s": opened, "total_s": total,
            "lines_per_s": len(lines) / total, "batch_p50_ms": statistics.median(per_batch) * 1000}


# --------------------------------------------------------------------------- a crash mid-transaction

CHILD = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from ab_txn_sink import TxnOutputs
bootstrap, verdicts, alerts, dlq, n = sys.argv[2:7]
out = TxnOutputs({"bootstrap.servers": bootstrap}, transactional_id="fencewatch-" + verdicts,
                 state_group="fencewatch-sink-" + verdicts, verdicts_topic=verdicts, alerts_topic=alerts,
                 dlq_topic=dlq, alerts_format="json")
assert out.write_batch(0, verdict_lines=[b'{"n": %d, "batch": 0}' % i for i in range(int(n))])
assert out.begin(1)
out.write(verdict_lines=[b'{"n": %d, "batch": 1}' % i for i in range(int(n) // 2)])
out._producer.flush(30)
os.kill(os.getpid(), signal.SIGKILL)
"""


def read_all(bootstrap: str, topic: str, isolation: str, idle_s: float = 2.0) -> list:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ab-reader", "isolation.level": isolation,
                  "enable.auto.commit": "false"})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out, last = [], time.monotonic()
    while time.monotonic() - last < idle_s:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append(json.loads(m.value()))
            last = time.monotonic()
    c.close()
    return out


def stable_after_kill(bootstrap: str, topic: str, restart: bool, n: int = 2_000) -> dict:
    """A child writes batch 0, opens batch 1, produces half of it and is SIGKILLed. What each
    reader sees, and how long until a ``read_committed`` reader's last stable offset passes the
    open transaction: with a restart (a new instance's ``init_transactions``) or without."""
    from confluent_kafka import Consumer, TopicPartition

    names = {"verdicts": topic, "alerts": topic + ".alerts", "dlq": topic + ".dlq"}
    from fencewatch.streaming.brokers.common import create_topics

    create_topics({"bootstrap.servers": bootstrap}, [topic], 4)
    create_topics({"bootstrap.servers": bootstrap}, [names["alerts"], names["dlq"]], 1)
    child = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent), bootstrap, topic,
                            names["alerts"], names["dlq"], str(n)], timeout=120)
    killed = time.monotonic()
    assert child.returncode < 0, child.returncode
    tps = [TopicPartition(topic, p) for p in range(4)]
    readers = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": "ab-lso", "isolation.level": iso})
               for iso in ("read_committed", "read_uncommitted")}

    def ends(iso):  # ListOffsets at the reader's isolation: the last stable offset under read_committed
        return {tp.partition: readers[iso].get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps}

    high, lso_at_kill = ends("read_uncommitted"), ends("read_committed")
    if restart:
        again = sink("txn", bootstrap, names, Path(tempfile.gettempdir()))
        skipped = not again.write_batch(0, verdict_lines=[b"{}"])
        assert again.write_batch(1, verdict_lines=[b'{"n": %d, "batch": 1}' % i for i in range(n)])
        again.close()
    else:
        skipped = None
    while min(ends("read_committed")[p] - high[p] for p in high) < 0 and time.monotonic() - killed < 300:
        time.sleep(0.2)
    stalled = time.monotonic() - killed
    for r in readers.values():
        r.close()
    committed = read_all(bootstrap, topic, "read_committed")
    uncommitted = read_all(bootstrap, topic, "read_uncommitted")
    return {"restart": restart, "stalled_s": round(stalled, 1), "skipped_batch0_on_restart": skipped,
            "held_back_at_kill": sum(high.values()) - sum(lso_at_kill.values()),
            "read_committed": len(committed), "read_uncommitted": len(uncommitted),
            "batch1_read_committed": sum(1 for v in committed if v.get("batch") == 1),
            "batch1_read_uncommitted": sum(1 for v in uncommitted if v.get("batch") == 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="an Apache Kafka broker")
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--batches", default="20000,1000", help="lines per micro-batch, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-crash", action="store_true")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ab-txn-"))
    try:
        return measure(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(a, work: Path) -> int:
    lines = verdict_lines(a.events, work)
    print(f"{len(lines):,} verdict lines, {sum(map(len, lines)) / len(lines):.0f} bytes each; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for batch in (int(b) for b in a.batches.split(",")):
        for r in range(a.rounds):
            for mode in (("none", "log", "txn") if r % 2 == 0 else ("txn", "log", "none")):
                row = run_mode(mode, a.bootstrap, lines, batch, work)
                rows.append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    print("\nmedian over rounds:")
    for batch in sorted({r["batch"] for r in rows}, reverse=True):
        for mode in ("none", "log", "txn"):
            mine = [r for r in rows if r["batch"] == batch and r["mode"] == mode]
            print(f"  {batch:>6} lines/batch  {mode:4}: batch p50 {statistics.median(r['batch_p50_ms'] for r in mine):8.1f} ms, "
                  f"{statistics.median(r['lines_per_s'] for r in mine):>9,.0f} lines/s, open "
                  f"{statistics.median(r['open_s'] for r in mine) * 1000:.0f} ms", flush=True)
    if not a.no_crash:
        for restart in (True, False):
            res = stable_after_kill(a.bootstrap, f"ab-crash-{uuid.uuid4().hex[:8]}", restart)
            print("crash mid-transaction:", json.dumps(res), flush=True)
    print(f"load at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
