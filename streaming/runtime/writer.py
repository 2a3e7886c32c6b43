"""The ``foreachBatch`` function: one micro-batch's output rows brought to the driver in chunks as
its tasks finish, written to the Kafka outputs (exactly once: ``sinks.kafka``'s sink log), counted
for the exporter and the job's totals."""
from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from fencewatch.sinks.kafka_topics import OutputTopicError
from fencewatch.sinks.metrics_batch import StepCounts
from fencewatch.state.status import VerdictShape
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.stats import JobStats


class StopRequested(RuntimeError):
    """A micro-batch refused at the sinks' door because a stop was asked: nothing of it is
    written, and the next start runs it again from the checkpoint."""


class BatchWriter:
    """The ``foreachBatch`` function: one micro-batch's outputs to Kafka, metrics and stats."""

    def __init__(self, cfg: cfgmod.Config, *, kafka=None, metrics=None, stats: JobStats | None = None,
                 progress=None):
        self.cfg = cfg
        self.kafka = kafka
        self.metrics = metrics
        self.stats = stats or JobStats()
        self.progress = progress  # callable -> the MetricsBatch fields read from the query (query_facts)
        self.query = None
        self.last_batch: int | None = None  # the last batch whose outputs were written (or skipped)
        self.closed = False  # a stop was asked: batches are refused (see :meth:`close`)
        #: an output topic deleted while the job ran (``KafkaOutputs._topics_missing``): the job ends
        #: with its one line instead of restarting the query (``commands.run``)
        self.fatal: OutputTopicError | None = None
        self._gate = threading.Lock()  # held while a batch writes; taken by close
        self._cond = threading.Condition()

    CHUNK_ROWS = 20_000  # output rows brought to the driver at a time (a batch is never collected whole)

    def __call__(self, df, batch_id: int) -> None:
        with self._gate:
            if self.closed:
                raise StopRequested(f"stopping: micro-batch {batch_id} not written; the next start runs it")
            try:
                self._write_batch(df, batch_id)
            except OutputTopicError as exc:
                self.fatal = exc
                # The batch fails (nothing of it committed) and the query with it; Spark and py4j
                # would log that with their stack traces, which the job's one line replaces.
                logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
                df.sparkSession.sparkContext.setLogLevel("OFF")
                raise

    def close(self, timeout_s: float) -> bool:
        """Refuse every batch from now on, once the one writing (if any) has finished: a stop then
        falls between batches however the trigger and the stop request interleave. False if the
        running batch did not finish in ``timeout_s`` (the stop interrupts it)."""
        ended = self._gate.acquire(timeout=max(0.0, timeout_s))
        self.closed = True
        if ended:
            self._gate.release()
        return ended

    def _write_batch(self, df, batch_id: int) -> None:
        t0 = time.monotonic()
        if self.kafka is not None and not self.kafka.begin(batch_id):
            for _ in _chunks(df, self.CHUNK_ROWS):
                pass  # written already; still computed: the batch's state is committed when it runs
            self._finished(batch_id)
            return
        acc = _BatchTotals()
        for pdf in _chunks(df, self.CHUNK_ROWS):
            self._chunk(pdf, acc)
        if self.kafka is not None:
            self.kafka.commit(batch_id)
        elapsed = time.monotonic() - t0
        latencies = acc.latencies_s()
        if self.metrics is not None:
            self.metrics.add_batch(
                batch_id=batch_id, alerts=acc.alerts, dlq=dict(acc.dlq_counts), **acc.steps.fields(),
                batch_duration_s=elapsed, decision_latencies_s=latencies,
                last_event_ts_ms=acc.last_ts, **(self.progress() if self.progress else {}))
        s = self.stats
        with s.lock:
            s.batches += 1
            s.events += acc.steps.events_read()
            for shapes, _ in acc.steps.summaries:
                for shape, n in shapes.items():
                    s.verdicts += n
                    s.by_class[VerdictShape._make(shape).cls] += n  # by name: a shape, or a tuple of its fields
            s.alerts_by_kind.update(a["kind"] for a in acc.alerts)
            s.dead_letters += acc.dead
            s.batch_seconds.append(elapsed)
            s.add_decisions(latencies * 1000, acc.stamps_ms(), int(time.time() * 1000))
        self._finished(batch_id)

    def _finished(self, batch_id: int) -> None:
        with self._cond:
            self.last_batch = batch_id
            self._cond.notify_all()

    def wait_batch_end(self, after: int | None, timeout_s: float) -> bool:
        """Block until a batch later than ``after`` has been written (True), or the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.last_batch is None or (after is not None and self.last_batch <= after):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.2))
        return True

    def _chunk(self, pdf, acc: "_BatchTotals") -> None:
        """One chunk of a batch's output rows: produced to Kafka, added to the batch's totals."""
        import numpy as np

        from fencewatch.streaming.runtime.outputs import STAMPS_DTYPE, read_frame, read_status, unpack_lines

        now_ms = int(time.time() * 1000)
        # "unknown" rows (unknown types) are counted by the "counts" row that comes with them.
        by_kind: dict[str, list] = {"verdicts": [], "alert": [], "status": [], "counts": [], "dlq": [], "group": []}
        for row in read_frame(pdf):
            by_kind.setdefault(row.record, []).append(row)
        verdict_rows, alert_rows, status_rows = by_kind["verdicts"], by_kind["alert"], by_kind["status"]
        # "verdicts": a state function call's verdict lines as bytes, each ending in "\n", packed
        # (``raw``), and their commits' ts in ``stamps`` (``outputs``).
        verdict_lines = [line for r in verdict_rows for line in unpack_lines(r.raw).split(b"\n")[:-1]]
        alert_dicts = [json.loads(r.json) for r in alert_rows]
        dead = [(r.raw, r.reason, r.json) for r in by_kind["dlq"]]
        for r in status_rows:  # a state function call's groups' steps, and their verdicts' summary
            acc.steps.add_status_row(*read_status(r.raw))
        views = [(r.cluster, r.group_id, r.json) for r in by_kind["group"]]
        if self.kafka is not None:
            self.kafka.write(verdict_lines=verdict_lines, alerts=alert_dicts, dead_letters=dead, group_views=views)
        if views and self.metrics is not None:
            self.metrics.note_group_views(views)  # the /groups page on the metrics port
        # One sample per decision (verdict line), kept in numpy: ~10^6 a backlog's batch.
        if verdict_rows:
            stamps = np.frombuffer(b"".join(r.stamps for r in verdict_rows), dtype=STAMPS_DTYPE)
            acc.latencies.append((now_ms - stamps) / 1000.0)
            acc.stamps.append(stamps)
        if alert_rows:
            alert_ts = np.array([r.ts for r in alert_rows], dtype=np.int64)
            acc.latencies.append((now_ms - alert_ts) / 1000.0)
            acc.stamps.append(alert_ts)
        for r in by_kind["counts"]:  # partition-scoped events, unknown types
            acc.steps.add_counts_row(r.cluster, json.loads(r.json))
        acc.alerts += alert_dicts
        ts_values = [r.ts for r in (*verdict_rows, *alert_rows, *status_rows) if r.ts is not None]
        if ts_values:
            acc.last_ts = max(ts_values + ([acc.last_ts] if acc.last_ts is not None else []))
        acc.dlq_counts.update(r.reason.split("(")[0] for r in by_kind["dlq"])
        acc.dead += len(dead)
        s = self.stats
        if s.track_ids:
            with s.lock:
                for line in verdict_lines:
                    v = json.loads(line)
                    s.event_ids[f"{v['event_id']}|{v['topic']}|{v['partition']}"] += 1


@dataclass
class _BatchTotals:
    """What a batch's chunks add up to (per key or per alert: bounded by groups, not by records)."""

    steps: StepCounts = field(default_factory=StepCounts)  # the groups' steps: statuses, their counts, verdicts
    alerts: list = field(default_factory=list)
    dlq_counts: Counter = field(default_factory=Counter)
    latencies: list = field(default_factory=list)  # numpy arrays of seconds, one per chunk
    stamps: list = field(default_factory=list)  # their events' ts (ms), array for array
    last_ts: int | None = None
    dead: int = 0

    def latencies_s(self):
        import numpy as np

        return np.concatenate(self.latencies) if self.latencies else np.empty(0, dtype=np.float64)

    def stamps_ms(self):
        import numpy as np

        return np.concatenate(self.stamps) if self.stamps else np.empty(0, dtype=np.int64)


def _chunks(df, rows: int):
    """The batch's rows as pandas frames of at most ``rows`` rows, each handed on as soon as Spark
    sends it: the driver never holds a whole batch, and it writes one partition's outputs while
    the others are still computed.

    Spark's Arrow collect (``collectAsArrowToPython``) runs one job over every partition and sends
    each partition's Arrow batches as soon as its task ends, contiguous and in order (a key's
    records live in one partition, so a group's outputs keep their order); pyspark's reader would
    hold them all to reorder partitions, which the sinks do not need, so they are read here in
    arrival order. A chunk is one Arrow batch (at most ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows), cut at ``rows``: merging batches up to ``rows`` left every partition's outputs waiting
    for the slowest task, and the driver's whole write after the job, on one core with the other
    idle (docs/decisions.md, "Outputs and exactly-once"). The JVM's socket buffer (8 KB) holds
    the last bytes of a partition's batch until the next partition's are written, so the driver
    runs one partition behind the tasks: with more shuffle partitions than cores it writes while
    they compute (``streaming.shuffle_partitions``; by default two per core: docs/decisions.md,
    "State partitions"). Before, ``df.rdd.toLocalIterator``
    ran one job per partition, one after the other, with rows pickled one by one. The jobs run
    inside the collect's own SQL execution, which ends when they do, so Spark 4's
    ``DAGScheduler.activeQueryToJobs`` keeps nothing (the soak's leak with
    ``DataFrame.toLocalIterator``, docs/reliability.md)."""
    from pyspark.errors.exceptions.captured import unwrap_spark_exception
    from pyspark.traceback_utils import SCCallSiteSync
    from pyspark.util import _load_from_socket

    with SCCallSiteSync(df.sparkSession.sparkContext):
        port, secret, server = df._jdf.collectAsArrowToPython()
    try:
        with _load_from_socket((port, secret), _arrival_order()()) as batches:
            for batch in batches:
                for start in range(0, batch.num_rows, rows):
                    yield _to_pandas(batch.slice(start, rows))
    finally:
        with unwrap_spark_exception():
            server.getResult()  # the job's own exception, if it failed


def _to_pandas(table):
    # Nullable integers as Python ints and None (not float64 and NaN), as rows gave them.
    return table.to_pandas(integer_object_nulls=True)


@functools.cache
def _arrival_order():
    """The serializer class (built on first use: pyspark is imported lazily in this module)."""
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    class ArrivalOrder(ArrowStreamSerializer):
        """The Arrow collect stream as it arrives; the trailing batch order is read and dropped."""

        def load_stream(self, stream):
            yield from super().load_stream(stream)
            n = read_int(stream)
            if n == -1:
                raise RuntimeError(f"Arrow collect failed in the JVM: {UTF8Deserializer().loads(stream)}")
            for _ in range(n):
                read_int(stream)

    return ArrivalOrder
