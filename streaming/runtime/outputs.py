"""The state function's output rows: what crosses from the Python workers to the driver.

Three Spark columns (``schemas.OUTPUT``): the record kind, its ts, and the rest of the row in one
msgpack frame. pyspark converts a pandas frame to Arrow column by column for every key of every
micro-batch, so each column costs per key and batch (docs/decisions.md, "Routing", narrow rows).
Rows are few (per key and batch: one of verdicts, one status for all its groups,
the alerts), so unpacking them on the driver costs nothing that counts.

A row, unpacked (:class:`OutRow`), by ``record``:

- ``verdicts`` (stream): ``seq`` of the first commit, ``ord`` lines, ``cluster``, ``group_id``,
  ``raw`` the lines packed (``state_fn.pack_lines``), ``stamps`` each line's commit ts (int64 LE);
- ``verdict`` (replay): one commit request's lines in ``json``, ``seq``, ``ord``;
- ``alert``: ``json``, ``alert_id``, ``cluster``, ``group_id``;
- ``status``: a call's groups' gauges and its verdicts' summary, pickled in ``raw`` (``state_fn.read_status``);
- ``group``: a group's snapshot (``state.group_view``) in ``json``, ``cluster``, ``group_id``;
  ``json`` None: the group was forgotten (a tombstone on the compacted groups topic);
- ``counts``: a topic key's partition-scoped event counts in ``json``, ``cluster``;
- ``dlq`` / ``unknown``: ``seq``, the coordinates in ``json``, the record in ``raw``, ``reason``.
"""
from __future__ import annotations

from typing import NamedTuple

import msgspec

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class OutRow(NamedTuple):
    record: str
    ts: int | None = None
    seq: int | None = None
    ord: int | None = None
    cluster: str | None = None
    group_id: str | None = None
    json: str | None = None
    alert_id: str | None = None
    raw: bytes | None = None
    reason: str | None = None
    stamps: bytes | None = None


class OutRows:
    """A call's output rows, gathered as the three Spark columns."""

    __slots__ = ("cols", "_record", "_ts", "_data")

    def __init__(self) -> None:
        self.cols: dict[str, list] = {"record": [], "ts": [], "data": []}
        self._record, self._ts, self._data = (c.append for c in self.cols.values())

    def add(self, record: str, ts: int | None, seq=None, ord=None, cluster=None, group_id=None, json=None,
            alert_id=None, raw=None, reason=None, stamps=None) -> None:
        self._record(record)
        self._ts(ts)
        self._data(_encode((seq, ord, cluster, group_id, json, alert_id, raw, reason, stamps)))

    def __len__(self) -> int:
        return len(self.cols["record"])


def read_rows(records, tss, datas) -> list[OutRow]:
    """The columns of OUTPUT rows (as lists) unpacked."""
    return [OutRow(r, None if t is None or t != t else int(t), *_decode(d)) for r, t, d in zip(records, tss, datas)]


def read_frame(pdf) -> list[OutRow]:
    """A pandas frame of OUTPUT rows unpacked."""
    return read_rows(pdf["record"].tolist(), pdf["ts"].tolist(), pdf["data"].tolist())
