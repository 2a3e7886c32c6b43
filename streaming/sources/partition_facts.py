"""Partition facts for truncation checks: ``partition_epochs`` events.

What lives here: ``epoch_starts`` (pure: find where each leader epoch starts
in a log, by bisection over a probe function) and ``PartitionFactsPoller``
(I/O: confluent-kafka's admin ``list_offsets`` plus an optional probing
consumer).

What the admin API gives and what it does not: ``list_offsets`` EARLIEST and
LATEST answer the log start and log end offsets together with a leader epoch
(Kafka returns the epoch of the earliest, resp. latest, entry of the leader
epoch cache). The cache itself, as OffsetsForLeaderEpoch would answer from it,
is not reachable through confluent-kafka's admin API. So:

- one epoch in the log (earliest epoch == latest epoch): the cache is exactly
  ``[{epoch, start_offset: log_start_offset}]``;
- several epochs: with probing on (the default), a consumer reads single
  records and their batch leader epoch (``Message.leader_epoch()``) and
  bisects for the first offset of each epoch that has records, at most
  ``probe_budget`` reads per partition per poll; the latest epoch, if it has
  no records yet, starts at the log end offset (a new leader assigns its epoch
  at its log end). If probing is off, fails, or runs out of budget, the event
  carries ``epochs: []`` and ``epochs_complete: false``, so the monitor can
  still check OFFSET_OUT_OF_RANGE but must not judge LOG_TRUNCATION from it.
- Kafka's cache can also hold epochs that never got records; they end where
  the next epoch starts and no consumer commits them, so leaving them out does
  not change any truncation verdict.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

from fencewatch.state.records import EventType

__all__ = ["epoch_starts", "PartitionFactsPoller", "build_epochs"]

log = logging.getLogger(__name__)

# (offset of the first record at or after the asked offset, its leader epoch), or None past the end.
EpochAt = Callable[[int], "tuple[int, int] | None"]


def epoch_starts(epoch_at: EpochAt, lo: int, lo_epoch: int, hi: int, hi_epoch: int,
                 budget: int) -> list[tuple[int, int]] | None:
    """First offsets of every epoch with records in (lo, hi], given records at
    ``lo`` (epoch ``lo_epoch``) and ``hi`` (epoch ``hi_epoch``). Epochs never
    decrease along a log, so "first record at or after x has an epoch > e" is
    monotonic in x: binary search, one boundary at a time. Returns
    ``[(epoch, start_offset), ...]`` or None when ``budget`` probes were not enough."""
    out: list[tuple[int, int]] = []
    probes = 0
    cache: dict[int, tuple[int, int] | None] = {}

    def probe(x: int) -> tuple[int, int] | None:
        nonlocal probes
        if x not in cache:
            probes += 1
            cache[x] = epoch_at(x)
        return cache[x]

    while lo_epoch < hi_epoch:
        x_lo, x_hi = lo + 1, hi  # the answer is in [x_lo, x_hi]; P(x_hi) holds
        while x_lo < x_hi:
            if probes >= budget:
                return None
            mid = (x_lo + x_hi) // 2
            found = probe(mid)
            if found is None or found[1] > lo_epoch:
                x_hi = mid
            else:
                x_lo = found[0] + 1  # records in [mid, found] are still at lo_epoch
        if x_lo == hi:
            first = (hi, hi_epoch)
        else:
            if probes >= budget and x_lo not in cache:
                return None
            first = probe(x_lo) or (hi, hi_epoch)
        out.append((first[1], first[0]))
        lo, lo_epoch = first
    return out


def build_epochs(log_start: int, start_epoch: int | None, log_end: int, end_epoch: int | None,
                 epoch_at: EpochAt | None, budget: int) -> list[dict[str, int]] | None:
    """The leader epoch cache as far as it can be known; None when it cannot."""
    if end_epoch is None:
        return None
    if log_end <= log_start:
        return [{"epoch": end_epoch, "start_offset": log_end}]
    if start_epoch is None:
        return None
    if start_epoch == end_epoch:
        return [{"epoch": end_epoch, "start_offset": log_start}]
    if epoch_at is None:
        return None
    first = epoch_at(log_start)
    last = None
    for back in range(1, 4):  # the tail may be a transaction marker, which consumers never see
        if log_end - back < log_start:
            break
        last = epoch_at(log_end - back)
        if last is not None and last[0] < log_end:
            break
        last = None
    if first is None or last is None:
        return None
    starts = epoch_starts(epoch_at, first[0], first[1], last[0], last[1], budget)
    if starts is None:
        return None
    epochs = [{"epoch": first[1], "start_offset": log_start}]
    epochs.extend({"epoch": e, "start_offset": o} for e, o in starts)
    if end_epoch > epochs[-1]["epoch"]:
        epochs.append({"epoch": end_epoch, "start_offset": log_end})
    return epochs


class PartitionFactsPoller:
    """Polls log start/end offsets (and epochs) of the partitions groups commit to."""

    def __init__(self, admin: Any, *, consumer_config: Mapping[str, Any] | None = None,
                 probe_budget: int = 64, timeout_s: float = 10.0, cluster: str | None = None) -> None:
        self.admin = admin
        self.consumer_config = dict(consumer_config) if consumer_config is not None else None
        self.probe_budget = probe_budget
        self.timeout_s = timeout_s
        self.cluster = cluster
        self.incomplete = 0

    def _list(self, partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], Any]:
        from confluent_kafka import TopicPartition

        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                          request_timeout=self.timeout_s)
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result()
            except Exception as exc:  # one partition failing must not stop the others
                log.warning("list_offsets %s[%d]: %s", tp.topic, tp.partition, exc)
        return out

    def poll(self, partitions: Iterable[tuple[str, int]], ts_ms: int) -> list[dict[str, Any]]:
        from confluent_kafka.admin import OffsetSpec

        parts = sorted(set(partitions))
        if not parts:
            return []
        earliest = self._list(parts, OffsetSpec.earliest())
        latest = self._list(parts, OffsetSpec.latest())
        consumer = None
        events = []
        try:
            for t, p in parts:
                e, l = earliest.get((t, p)), latest.get((t, p))
                if e is None or l is None:
                    continue
                start_epoch = e.leader_epoch if e.leader_epoch is not None and e.leader_epoch >= 0 else None
                end_epoch = l.leader_epoch if l.leader_epoch is not None and l.leader_epoch >= 0 else None
                epoch_at = None
                if self.consumer_config is not None and start_epoch != end_epoch:
                    if consumer is None:
                        consumer = self._consumer()
                    epoch_at = _consumer_probe(consumer, t, p, self.timeout_s)
                epochs = build_epochs(e.offset, start_epoch, l.offset, end_epoch, epoch_at, self.probe_budget)
                event: dict[str, Any] = {"type": EventType.PARTITION_EPOCHS.value, "ts": ts_ms}
                if self.cluster is not None:
                    event["cluster"] = self.cluster
                event.update(event_id=f"partition_epochs/{t}/{p}/{ts_ms}", topic=t, partition=p,
                             log_start_offset=e.offset, log_end_offset=l.offset, epochs=epochs or [])
                if epochs is None:
                    self.incomplete += 1
                    event["epochs_complete"] = False
                events.append(event)
        finally:
            if consumer is not None:
                consumer.close()
        return events

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        conf = {"logger": logging.getLogger("fencewatch.kafka.consumer"), **(self.consumer_config or {})}
        conf.update({"group.id": conf.get("group.id", "fencewatch-bridge-probe"), "enable.auto.commit": False,
                     "enable.partition.eof": True, "isolation.level": "read_uncommitted",
                     "fetch.max.bytes": 1 << 20})
        return Consumer(conf)


def _consumer_probe(consumer: Any, topic: str, partition: int, timeout_s: float) -> EpochAt:
    from confluent_kafka import KafkaError, TopicPartition

    def epoch_at(offset: int) -> tuple[int, int] | None:
        consumer.assign([TopicPartition(topic, partition, offset)])
        while True:
            msg = consumer.poll(timeout_s)
            if msg is None:
                return None
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return None
                raise RuntimeError(f"probe {topic}[{partition}]@{offset}: {msg.error()}")
            if msg.topic() == topic and msg.partition() == partition and msg.offset() >= offset:
                epoch = msg.leader_epoch()
                return msg.offset(), (epoch if epoch is not None else -1)

    return epoch_at
