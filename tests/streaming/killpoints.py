"""``fencewatch`` with a SIGKILL at a chosen point of a micro-batch's write to Kafka (fault tests).

    python killpoints.py POINT FLAG [fencewatch args...]

runs the public command in this process with the Kafka sink's steps wrapped: once the file
``FLAG`` exists, the next batch the sink begins is killed at ``POINT`` (with ``KILLPOINTS_LAST=1``,
the next one that reads the input topics to their ends: a backlog's last batch, which releases the
events still held at once; with ``KILLPOINTS_FRESH=1`` too, only a first attempt, not a batch the sink
log found pending):

- ``begin``: its "pending" line is in the sink log, no record produced yet;
- ``mid``: about half of its verdict lines delivered (flushed), the rest not produced;
- ``inflight``: half of its verdict lines handed to the producer and not waited for (some on
  the wire, some in librdkafka's queue: what an idempotent producer holds at a crash);
- ``delivered``: every record delivered, the batch not yet logged "done";
- ``logged``: logged "done", Spark's commit log not yet written.

The kill is a crash of the whole host's share of the job: Spark's JVM (a session of its own) and
its Python workers first, then this process group, all with SIGKILL. Nothing else is changed:
the sink, the query and the checkpoint are the command's own.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

POINTS = ("begin", "mid", "inflight", "delivered", "logged")


def _descendants(pid: int) -> list[int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            parents[int(name)] = int(stat[stat.rfind(")") + 2:].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def crash(note: str) -> None:
    """SIGKILL every process of the job: descendants (JVM, workers), then this process group;
    with ``KILLPOINTS_GROUP_ONLY=1`` this process group alone (``kill -9 -- -PGID``: Spark's JVM,
    in a session of its own, lives on until it sees its driver gone)."""
    sys.stderr.write(f"killpoints: SIGKILL {note}\n")
    sys.stderr.flush()
    if os.environ.get("KILLPOINTS_GROUP_ONLY") != "1":
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _last_of_backlog(args: list[str], batch_id: int) -> bool:
    """Batch ``batch_id`` reads records and ends where the input topics end now (read from its
    ``offsets/N``; the broker's end offsets): the backlog's last batch, the one that releases the
    events still held (with or without the source's ``fencewatch:caught_up`` mark)."""
    from confluent_kafka import Consumer, TopicPartition

    def ends(n: int) -> dict:
        try:
            lines = (checkpoint / "offsets" / str(n)).read_text().split("\n")[2:]
        except OSError:
            return {}
        return {(t, int(p)): o for line in lines if line.strip().startswith("{")
                for t, parts in json.loads(line).items() if isinstance(parts, dict) for p, o in parts.items()}

    checkpoint = Path(args[args.index("--checkpoint") + 1])
    end = ends(batch_id)
    if not end or end == ends(batch_id - 1):
        return False
    c = Consumer({"bootstrap.servers": args[args.index("--bootstrap-servers") + 1], "group.id": "killpoints"})
    try:
        return all(c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1] <= o for (t, p), o in end.items())
    finally:
        c.close()


def install(point: str, flag: Path, args: list[str]) -> None:
    """Wrap ``KafkaOutputs``' steps so that the first batch begun after ``flag`` exists dies at ``point``."""
    from fencewatch.sinks.kafka import KafkaOutputs, parse_log

    if point not in POINTS:
        raise SystemExit(f"killpoints: unknown point {point!r}; valid: {', '.join(POINTS)}")
    armed: dict = {}
    last_only = os.environ.get("KILLPOINTS_LAST") == "1"
    fresh_only = os.environ.get("KILLPOINTS_FRESH") == "1"
    begin, write, flush, commit = KafkaOutputs.begin, KafkaOutputs.write, KafkaOutputs._flush, KafkaOutputs.commit

    def _begin(self, batch_id):
        rerun = self.marker is not None and parse_log(self.marker.read())["batch"] == batch_id
        started = begin(self, batch_id)
        if (started and not armed and flag.exists() and not (fresh_only and rerun)
                and (not last_only or _last_of_backlog(args, batch_id))):
            armed.update(batch=batch_id, lines=0)
            if point == "begin":
                crash(f"batch {batch_id}: logged pending, nothing produced")
        return started

    def _write(self, *, verdict_lines=(), **rest):
        if armed.get("batch") != self._batch or point not in ("mid", "inflight"):
            return write(self, verdict_lines=verdict_lines, **rest)
        lines = list(verdict_lines)
        armed["lines"] += len(lines)
        write(self, verdict_lines=lines, **rest)
        # Half of a batch is not known in advance: its first half of the rows Spark has sent so far,
        # once they make a few thousand lines (a batch of the trial writes tens of thousands).
        if armed["lines"] >= int(os.environ.get("KILLPOINTS_LINES", "4000")):
            if point == "mid":
                self._producer.flush(30)
            else:
                self._producer.poll(0)
            crash(f"batch {self._batch} ({point}): {armed['lines']} verdict lines produced")

    def _flush(self, batch_id):
        flush(self, batch_id)
        if armed.get("batch") == batch_id and point == "delivered":
            crash(f"batch {batch_id}: every record delivered, not logged done")

    def _commit(self, batch_id):
        commit(self, batch_id)
        if armed.get("batch") == batch_id and point == "logged":
            crash(f"batch {batch_id}: logged done, Spark's commit not written")

    KafkaOutputs.begin, KafkaOutputs.write, KafkaOutputs._flush, KafkaOutputs.commit = _begin, _write, _flush, _commit


def main(argv: list[str]) -> int:
    point, flag, *args = argv
    install(point, Path(flag), args)
    from fencewatch.streaming.cli import main as fencewatch

    return fencewatch(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
