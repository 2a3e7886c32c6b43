"""The state function's output rows: what crosses from the Python workers to the driver.

Three Spark columns (``schemas.OUTPUT``): the record kind, its ts, and the rest of the row in one
msgpack frame. pyspark converts a pandas frame to Arrow column by column for every key of every
micro-batch, so each column costs per key and batch (docs/decisions.md, "Routing", narrow rows).
Rows are few (per key and batch: one of verdicts, one status for all its groups,
the alerts), so unpacking them on the driver costs nothing that counts.

A row, unpacked (:class:`OutRow`), by ``record``:

- ``verdicts`` (stream): ``seq`` of the first commit, ``ord`` lines, ``cluster``, ``group_id``,
  ``raw`` the lines packed (:func:`pack_lines`), ``stamps`` each line's commit ts (:func:`pack_stamps`);
- ``verdict`` (replay): one commit request's lines in ``json``, ``seq``, ``ord``;
- ``alert``: ``json``, ``alert_id``, ``cluster``, ``group_id``;
- ``status``: a call's groups' gauges and its verdicts' summary, pickled in ``raw`` (:func:`read_status`);
- ``group``: a group's snapshot (``state.group_view``) in ``json``, ``cluster``, ``group_id``;
  ``json`` None: the group was forgotten (a tombstone on the compacted groups topic);
- ``counts``: a topic key's partition-scoped event counts in ``json``, ``cluster``;
- ``dlq`` / ``unknown``: ``seq``, the coordinates in ``json``, the record in ``raw``, ``reason``.

Each field's encoding is written and read here, once: the state function (on the workers) packs,
the writer (on the driver) and the tests unpack, both through this module.
"""
from __future__ import annotations

import pickle
import sys
from array import array
from collections import Counter
from typing import NamedTuple

import msgspec

from fencewatch.streaming.runtime.columns import pack_bytes, unpack_bytes

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode
_PICKLE = pickle.HIGHEST_PROTOCOL
STAMPS_DTYPE = "<i8"
"""A ``verdicts`` row's ``stamps``: each line's commit ts, little-endian int64 (numpy's dtype)."""


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


# --------------------------------------------------------------------------- the fields' encodings

def pack_lines(data: bytes) -> bytes:
    """Verdict lines as they cross the JVM and the collect (``columns.pack_bytes``). The lines are
    ~1.8 KB of JSON per event and repeat themselves, so LZ4 shrinks them many-fold for little
    CPU: uncompressed, moving them through Spark was a large share of the job's CPU
    (docs/decisions.md, "Outputs and exactly-once")."""
    return pack_bytes(data)


unpack_lines = unpack_bytes  # the bytes :func:`pack_lines` packed


def pack_stamps(values: list[int]) -> bytes:
    """Commit timestamps as :data:`STAMPS_DTYPE` bytes (the writer reads them with numpy)."""
    a = array("q", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def pack_status(statuses: list[dict], summary: tuple[Counter, Counter] | None) -> bytes:
    """A ``status`` row's ``raw``: a call's groups' statuses and their verdicts' summary."""
    return pickle.dumps((statuses, summary), _PICKLE)


def read_status(raw: bytes) -> tuple[list[dict], tuple[Counter, Counter] | None]:
    """What :func:`pack_status` packed."""
    return pickle.loads(raw)
