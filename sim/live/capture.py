"""Captures of what a real broker wrote during a run, as test fixtures.

What lives here: the request log's lines of the commit and heartbeat APIs (kept whole),
``__consumer_offsets`` read back as raw records in the bridge's ``--from-file`` form
(JSON lines ``{"key": base64, "value": base64 or null, "timestamp": ms}``), and the
files a capture directory holds (:func:`write_capture`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import uuid
from typing import Any, Iterable

from confluent_kafka import Consumer, TopicPartition

from .expect import Expectation, dump_expectations

__all__ = ["CAPTURED_APIS", "request_log_lines", "consumer_offsets_records", "write_capture", "wait_for_log"]

log = logging.getLogger(__name__)

CAPTURED_APIS = (8, 28, 68)  # OffsetCommit, TxnOffsetCommit, ConsumerGroupHeartbeat (contract §10)


def request_log_lines(lines: Iterable[str], apis: Iterable[int] = CAPTURED_APIS) -> list[str]:
    """The lines of these APIs, unchanged (the key is read where Kafka writes it, in the header)."""
    keys = tuple(f'"requestHeader":{{"requestApiKey":{a},' for a in apis)
    return [line if line.endswith("\n") else line + "\n" for line in lines if any(k in line for k in keys)]


def wait_for_log(path: str, settle_s: float = 1.0, timeout_s: float = 15.0) -> None:
    """Wait until the request log stopped growing for ``settle_s`` (the last responses written)."""
    deadline = time.monotonic() + timeout_s
    size, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_size = os.path.getsize(path) if os.path.exists(path) else 0
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            return
        time.sleep(0.1)


def consumer_offsets_records(bootstrap: str, extra: dict[str, Any] | None = None,
                             timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every record of ``__consumer_offsets``, partition by partition in offset order, as the
    bridge's ``--from-file`` reads them. A plain consumer assigned every partition (no
    subscription, so the Java client's ``exclude.internal.topics`` has no librdkafka
    counterpart to set), ``read_committed``: records of aborted transactional commits are
    left out, as the live bridge reads them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fw-capture-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, **(extra or {})})
    try:
        meta = c.list_topics("__consumer_offsets", timeout=10).topics.get("__consumer_offsets")
        if meta is None or meta.error is not None:
            return []
        parts = sorted(meta.partitions)
        c.assign([TopicPartition("__consumer_offsets", p, 0) for p in parts])
        records: dict[int, list[dict[str, Any]]] = {p: [] for p in parts}
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    done.add(m.partition())
                continue
            value = m.value()
            records[m.partition()].append({
                "key": base64.b64encode(m.key() or b"").decode("ascii"),
                "value": None if value is None else base64.b64encode(value).decode("ascii"),
                "timestamp": m.timestamp()[1]})
        if len(done) < len(parts):
            raise TimeoutError(f"__consumer_offsets not read to its end in {timeout_s:.0f} s")
        return [r for p in parts for r in records[p]]
    finally:
        c.close()


def write_capture(directory: str, *, lines: list[str], records: list[dict[str, Any]], topic_ids: dict[str, str],
                  expectations: list[Expectation], readme: str) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "request-log.txt"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    with open(os.path.join(directory, "consumer-offsets.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
    with open(os.path.join(directory, "topic-ids.json"), "w", encoding="utf-8") as f:
        json.dump(dict(sorted(topic_ids.items(), key=lambda kv: kv[1])), f, indent=1)
        f.write("\n")
    with open(os.path.join(directory, "expectations.jsonl"), "w", encoding="utf-8") as f:
        f.write(dump_expectations(expectations))
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write(readme)
    log.info("capture written to %s: %d request-log lines, %d __consumer_offsets records, %d expectations",
             directory, len(lines), len(records), len(expectations))
