"""Requests stored lazily: a store that only needs each partition's newest value keeps the
requests as they come and folds them in when something reads it."""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence, TypeVar

T = TypeVar("T")

# Requests a store keeps unfolded at most: bounds its memory, while a fold still finds most
# members' requests several times over (each counts once).
UNFOLDED_LIMIT = 128


def newest_per_shape(log: Sequence[T], shapes: Iterable[Hashable]) -> list[T]:
    """The newest entry of each shape (``shapes``: the partitions each entry covers, in order),
    in the order of those newest entries. Applied in that order, they leave every partition the
    value the newest entry covering it gave, as applying all of them would: an entry is dropped
    only for a later one of the same shape, which covers the same partitions. C-level loops
    only (a Python loop cost more than the updates it saved).

    Shapes may be ids of the entries' partition tuples (decoding shares one tuple per member and
    partition list): the log holds them all, so no id is reused meanwhile. Such ids are taken
    when folding, never stored: a pickled log would carry another process's ids."""
    newest = dict(zip(shapes, range(len(log))))  # shape -> index of its newest entry
    return list(map(log.__getitem__, sorted(newest.values())))
