"""A commit's ``offsets`` read into columns (``state.events.CommitOffsets``), and the
(topic, partition) keys shared between a member's requests.

What lives here: :func:`offsets` (a parsed commit's list: the common shape with C-level maps
and no object per partition, anything else row by row with the declared field readers, which
name the bad field), :func:`columns` and :func:`shared_tps`, which the typed fast paths use too.
Internal to ``streaming.ingest``.
"""
from __future__ import annotations

from itertools import chain, repeat
from operator import itemgetter

from fencewatch.state.events import CommitOffset, CommitOffsets
from fencewatch.state.memo import Memo
from fencewatch.state.records import PARTITION_OFFSET, check_names
from fencewatch.streaming.ingest.fields import INT64, INT_TYPES, STR_TYPES, Bad, list_of, req, scalar_reader

_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot path)

# (topic, partitions) -> (the (topic, partition) keys, the partitions); bounded above the members
# of a large cluster.
_SHARED_TPS = Memo(1 << 15)


def columns(topics: tuple, partitions: tuple, offsets: tuple, epochs: tuple) -> CommitOffsets:
    """Checked columns of a request's partitions as :class:`CommitOffsets`."""
    first = topics[0]
    if topics.count(first) != len(topics):
        return CommitOffsets(tuple(zip(topics, partitions)), offsets, epochs, None, partitions, None)
    tps, partitions = shared_tps(first, partitions)
    return _new_tuple(CommitOffsets, (tps, offsets, epochs, None, partitions, first))


def shared_tps(topic: str, partitions: tuple) -> tuple[tuple, tuple]:
    """The (topic, partition) keys of one topic's partitions and the partitions, one shared pair
    of tuples per distinct list: a member commits (and is assigned) the same partitions again and
    again, so the engine's lookups by them (request cache, offsets, owners) compare by identity,
    and its logs of stored requests (``state.folding``) tell a repeated request by it."""
    key = (topic, partitions)
    shared = _SHARED_TPS.get(key)
    if shared is None:
        shared = _SHARED_TPS.put(key, (tuple(zip(repeat(topic), partitions)), partitions))
    return shared


# The fast path's row: every declared field of a partition but the optional metadata, in this
# order (a row with metadata, or without a leader epoch, takes the checked path).
_FAST_ROW = ("topic", "partition", "offset", "leader_epoch")
check_names(f"{__name__}._FAST_ROW", (*_FAST_ROW, "metadata"), PARTITION_OFFSET.names,
            record=PARTITION_OFFSET.name)
_OFFSET_FIELDS = itemgetter(*_FAST_ROW)
FAST_ROW_FIELDS = len(_FAST_ROW)


def offsets(d) -> CommitOffsets:
    """Columns of the ``offsets`` list of a parsed commit. The fast path takes the common shape
    (exactly topic, partition, offset and leader_epoch, of the right types) with C-level maps
    and no object per partition; anything else takes the checked path, which names the bad field."""
    raw = d.get("offsets")
    if type(raw) is list and raw:
        try:
            topics, partitions, offsets_, epochs = zip(*map(_OFFSET_FIELDS, raw))
        except (KeyError, TypeError):
            topics = None
        if topics is not None and sum(map(len, raw)) == FAST_ROW_FIELDS * len(raw):  # no field beyond these
            ints = (partitions, offsets_, epochs)
            if (STR_TYPES.issuperset(map(type, topics)) and INT_TYPES.issuperset(map(type, chain(*ints)))
                    and -INT64 <= min(map(min, ints)) and max(map(max, ints)) < INT64):
                return columns(topics, partitions, offsets_, epochs)
    return CommitOffsets.of(offsets_checked(d))


# How each field of a row is read, in ``CommitOffset``'s order (state.events checks its fields).
_ROW_PLAN = tuple((*scalar_reader(PARTITION_OFFSET.slot(n)), n) for n in CommitOffset._fields)


def offsets_checked(d) -> list[CommitOffset]:
    out = []
    for i, o in enumerate(list_of(req(d, "offsets"), "offsets")):
        if type(o) is not dict:
            raise Bad("WRONG_TYPE", field=f"offsets[{i}]", expected="object", got=type(o).__name__)
        try:
            out.append(_new_tuple(CommitOffset, [read(o, name, arg) for read, arg, name in _ROW_PLAN]))
        except Bad as bad:
            bad.params["field"] = f"offsets[{i}].{bad.params.get('field', '')}"
            raise
    return out
