"""Benchmark: state that follows the cluster (issue 36). Many ephemeral groups come and go; the
streaming job's state comes back to what it was before them.

The job (``start_query``, the RocksDB state store, ``fencewatch run``'s query) reads from the
embedded broker, live: events are stamped with the wall clock as they are produced, so the
keys' state timeouts (processing time, each key's own event-time clock: ``streaming/runtime/hold.py``)
run as they would on a cluster.

1. Baseline: a few long-lived groups join and commit; their commits go on once a second all
   along (what keeps them, and the truncation watch of their topics, mentioned).
2. Churn: ``--groups`` ephemeral groups (``bench/traces.py:ephemeral_group``), each: a member
   joins, commits twice, then, in turn, leaves and its offsets are deleted; leaves and its
   offsets are left to expire; leaves and the coordinator deletes the group (Dead); or crashes
   unseen and nothing mentions it again.
3. Wait: until the state rows are back at the baseline (or ``--timeout``).

Retentions are shortened so that this takes minutes, not weeks: ``offsets.retention`` 5 s,
its check interval 2 s, ``state.group_retention`` 20 s (each is a setting of the job). Rows and
bytes are Spark's own figures for the state store (``stateOperators``: ``numRowsTotal``,
``memoryUsedBytes``, and the RocksDB custom metrics), as the job exports them
(``fencewatch_state_rows``, ``fencewatch_state_memory_bytes``).

    python bench/bench_churn.py [--groups 10000] [--write-docs]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_section  # noqa: E402
from bench.traces import long_lived_commits, ephemeral_group  # noqa: E402

logging.basicConfig(level=logging.WARNING)

LONG_LIVED = 3
RULES = {"offsets_retention_ms": 5_000, "offsets_retention_check_interval_ms": 2_000, "group_retention_ms": 20_000,
         "expiry_warning_ms": 1_000}


def state_figures(query) -> dict:
    """The state store's own figures from the query's last progress report (every operator)."""
    ops = ((query.lastProgress or {}).get("stateOperators")) or []
    out = {"rows": sum(int(op.get("numRowsTotal") or 0) for op in ops),
           "memory_bytes": sum(int(op.get("memoryUsedBytes") or 0) for op in ops),
           "batch": (query.lastProgress or {}).get("batchId")}
    for op in ops:
        for name, value in (op.get("customMetrics") or {}).items():
            if name in ("rocksdbSstFileSize", "rocksdbTotalBytesWritten", "rocksdbPinnedBlocksMemoryUsage"):
                out[name] = out.get(name, 0) + int(value)
    return out


class Producer:
    """The events as a live cluster would write them: membership to the heartbeats topic, the rest
    to the offsets topic, keyed by group, stamped with the wall clock when produced."""

    def __init__(self, bootstrap: str, hb: str, off: str):
        from confluent_kafka import Producer as KafkaProducer

        from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES

        self._p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._hb, self._off, self._membership = hb, off, MEMBERSHIP_TYPES
        self._lock = threading.Lock()
        self.produced = 0

    def send(self, events: list[dict], ts: int) -> None:
        with self._lock:
            base = min(e["ts"] for e in events)
            for e in events:
                e = {**e, "ts": ts + (e["ts"] - base)}
                topic = self._hb if e["type"] in self._membership else self._off
                self._p.produce(topic, key=e["group_id"].encode(), value=json.dumps(e).encode())
            self._p.poll(0)
            self.produced += len(events)

    def flush(self) -> None:
        with self._lock:
            self._p.flush(30)


def _now() -> int:
    return int(time.time() * 1000)


def run_churn(spark, bootstrap: str, topics: dict, *, groups: int, checkpoint: str, rate: int = 500,
              timeout_s: float = 600.0, sample=None) -> dict:
    """The three phases on ``topics`` ({"hb", "off"}); ``rate``: ephemeral groups started per
    second; ``sample(phase, figures)``: called with each new progress report. Returns the figures
    at the baseline, during the churn (once the job has read every event produced), at the end,
    and how long the way back took."""
    from fencewatch.streaming import config as cfgmod
    from fencewatch.streaming.runtime.checkpoint import state_figures as stored
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.query import start_query, stop_between_batches

    cfg = cfgmod.load_config(environ={}, overrides={
        "streaming": {"bootstrap_servers": bootstrap, "heartbeats_topic": topics["hb"], "offsets_topic": topics["off"],
                      "starting_offsets": "earliest", "checkpoint_location": checkpoint, "max_skew_ms": 1_000},
        "sinks": {"verdicts_topic": ""}, "state": RULES})
    producer = Producer(bootstrap, topics["hb"], topics["off"])
    stop = threading.Event()

    def keep_alive(join: bool = False) -> None:
        producer.send(long_lived_commits(LONG_LIVED, 0, join=join), _now())
        producer.flush()

    def heartbeat_loop() -> None:  # the long-lived groups commit once a second, all along
        while not stop.wait(1.0):
            keep_alive()

    writer = BatchWriter(cfg, stats=JobStats())
    keep_alive(join=True)
    query = start_query(spark, cfg, writer, trigger="500 milliseconds")
    ticker = threading.Thread(target=heartbeat_loop, daemon=True)
    ticker.start()
    figures: dict = {}
    try:
        figures["baseline"] = _settle(query, lambda f: f["rows"] >= LONG_LIVED + 1, 120, "baseline", sample)
        figures["baseline"]["stored"] = stored(spark, checkpoint)
        base_rows = figures["baseline"]["rows"]
        t0 = time.monotonic()
        for n in range(groups):
            producer.send(ephemeral_group(n, 0), _now())
            if n % rate == rate - 1:
                producer.flush()
                time.sleep(max(0.0, (n + 1) / rate - (time.monotonic() - t0)))
        producer.flush()
        figures["churn_s"] = round(time.monotonic() - t0, 1)
        # During: once the job has read every event produced (the first groups already forgotten).
        time.sleep(2.0)  # a keep-alive produce since: Tansu shows each partition's last batch (NOTES.md)
        ends = _log_ends(bootstrap, topics)
        seen = _watch(query, lambda f: _read_past(query, ends), timeout_s, "churn", sample)
        figures["during"] = seen[-1]
        figures["during"]["stored"] = stored(spark, checkpoint)
        figures["during"]["remembered"] = remembered(spark, checkpoint)
        seen += _watch(query, lambda f: f["rows"] <= base_rows, timeout_s, "forgetting", sample)
        figures["back_s"] = round(time.monotonic() - t0 - figures["churn_s"], 1)
        figures["max_rows"] = max(f["rows"] for f in seen)
        # The topics' watches forget a group's commits at their next item past group_retention.
        figures["end"] = _watch(query, lambda f: False, 5.0, "forgetting", sample)[-1]
        figures["end"]["stored"] = stored(spark, checkpoint)
        figures["end"]["remembered"] = remembered(spark, checkpoint)
        figures["events"] = producer.produced
        figures["groups"] = groups
    finally:  # the query first: the long-lived groups stay mentioned until it has stopped
        stop_between_batches(query, timeout_s=60)
        stop.set()
        ticker.join(5)
    return figures


def remembered(spark, checkpoint: str, prefix: str = "console-consumer-") -> int:
    """Groups named ``prefix...`` the stored state still knows of anywhere: as group keys, or in
    a topic watch's commits (read with the state data source, decoded by the state codec)."""
    from fencewatch.streaming.runtime.checkpoint import state_reader
    from fencewatch.streaming.runtime.routing import parse_key
    from fencewatch.streaming.runtime.state_codec import decode_bucket, decode_state

    rows = state_reader(spark).load(checkpoint).selectExpr(
        "key.key AS key", "value.groupState.blob AS blob").collect()
    names = set()
    for row in rows:
        key = parse_key(row["key"])
        if key[0] == "g":
            names.add(key[2])
        elif key[0] == "G":
            names |= set(decode_bucket(row["blob"], key))
        elif row["blob"] is not None:
            for tw in decode_state(key, row["blob"]).values():
                names |= set(tw.committed) | set(tw.group_ts) | {u[0] for u in tw.unfolded}
    return sum(1 for n in names if n.startswith(prefix))


def _log_ends(bootstrap: str, topics: dict) -> dict[str, dict[str, int]]:
    """Each partition's end offset now, as the source's offsets read: {topic: {"0": n}}."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-churn-ends"})
    try:
        out = {}
        for topic in topics.values():
            for p in c.list_topics(topic, timeout=10).topics[topic].partitions:
                out.setdefault(topic, {})[str(p)] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        return out
    finally:
        c.close()


def _read_past(query, ends: dict) -> bool:
    """Whether the query's last batch ended at or past ``ends`` in every partition."""
    for src in (query.lastProgress or {}).get("sources", []):
        try:
            end = json.loads(src.get("endOffset") or "{}")
        except (TypeError, ValueError):
            return False
        if all(int(end.get(t, {}).get(p, -1)) >= o for t, parts in ends.items() for p, o in parts.items()):
            return True
    return False


def _watch(query, done, timeout_s: float, phase: str, sample) -> list[dict]:
    """Every new progress report's figures until ``done(figures)`` or ``timeout_s``."""
    seen, out = None, []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.isActive:
        f = state_figures(query)
        if f["batch"] is not None and f["batch"] != seen:
            seen = f["batch"]
            out.append(f)
            if sample is not None:
                sample(phase, f)
            if done(f):
                break
        time.sleep(0.2)
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    return out or [state_figures(query)]


def _settle(query, ready, timeout_s: float, phase: str, sample) -> dict:
    """The figures once ``ready`` holds and the rows stayed the same for 5 reports."""
    history = _watch(query, lambda f: False, 0, phase, sample)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        history += _watch(query, lambda f: True, 2.0, phase, sample)
        last = history[-5:]
        if len(last) == 5 and ready(last[-1]) and len({f["rows"] for f in last}) == 1:
            return last[-1]
    raise RuntimeError(f"{phase}: state did not settle: {history[-5:]}")


def report(fig: dict, load: float) -> str:
    b, p, e = ({**f, **{f"stored_{k}": v for k, v in f["stored"].items()}} for f in
               (fig["baseline"], fig["during"], fig["end"]))
    rows = [("state rows (numRowsTotal)", "rows"), ("ephemeral groups the state remembers", "remembered"),
            ("stored groups", "stored_groups"),
            ("stored rows: group keys", "stored_group_rows"), ("stored rows: group buckets", "stored_group_bucket_rows"),
            ("stored rows: topic keys", "stored_topic_rows"),
            ("stored bytes: group keys", "stored_group_bytes"), ("stored bytes: group buckets",
                                                                  "stored_group_bucket_bytes"),
            ("stored bytes: topic keys", "stored_topic_bytes"),
            ("RocksDB memory (memoryUsedBytes)", "memory_bytes"),
            ("RocksDB SST files bytes (rocksdbSstFileSize)", "rocksdbSstFileSize")]
    lines = [f"ephemeral groups: {fig['groups']:,} ({fig['events']:,} events, produced live in {fig['churn_s']} s), "
             f"beside {LONG_LIVED} long-lived groups committing every second",
             f"retentions (shortened): offsets {RULES['offsets_retention_ms'] // 1000} s, check interval "
             f"{RULES['offsets_retention_check_interval_ms'] // 1000} s, group_retention "
             f"{RULES['group_retention_ms'] // 1000} s",
             f"{'':44}{'baseline':>14}{'during':>14}{'end':>14}"]
    for label, key in rows:
        if key in b or key in e:
            lines.append(f"{label:44}{b.get(key, 0):>14,}{p.get(key, 0):>14,}{e.get(key, 0):>14,}")
    lines.append("stored: the keys' encoded state as the checkpoint holds it at the last committed batch (Spark's "
                 "state data source, `fencewatch checkpoint show --state`); RocksDB's memory follows its caches")
    lines.append(f"most state rows seen: {fig['max_rows']:,}; back to the baseline's rows {fig['back_s']} s after "
                 f"the last group was produced")
    lines.append(f"load average at the end: {load:.2f} (a shared 2-core machine: times are indicative)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--rate", type=int, default=500, help="ephemeral groups started per second")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the state to come back")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    import os

    from fencewatch.streaming.brokers.tansu import EmbeddedBroker
    from fencewatch.streaming.runtime.session import checkpoint_conf, spark_session

    work = tempfile.mkdtemp(prefix="bench-churn-")
    spark = spark_session("local[2]", extra=checkpoint_conf(work))
    try:
        with EmbeddedBroker() as broker:
            topics = {"hb": f"hb-churn-{time.time_ns()}", "off": f"off-churn-{time.time_ns()}"}
            broker.create_topics([topics["hb"], topics["off"]], partitions=4)
            fig = run_churn(spark, broker.bootstrap, topics, groups=args.groups, checkpoint=work + "/cp",
                            rate=args.rate, timeout_s=args.timeout,
                            sample=lambda phase, f: print(phase, json.dumps(f), file=sys.stderr))
    finally:
        spark.stop()
    text = report(fig, os.getloadavg()[0])
    print(text)
    if args.write_docs:
        write_section("state that follows the cluster: ephemeral groups",
                      "make bench  (python bench/bench_churn.py --write-docs)", "```\n" + text + "\n```")
    return 0 if fig["end"]["rows"] <= fig["baseline"]["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
