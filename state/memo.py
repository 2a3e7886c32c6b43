"""Bounded memo tables for the hot paths (policy outcomes, shared request keys, rendered text)."""
from __future__ import annotations


class Memo(dict):
    """A memo table of values cheap to recompute, bounded to ``limit`` entries: emptied when
    full, so lookups stay a plain ``dict.get`` with no bookkeeping (unlike an LRU)."""

    __slots__ = ("limit",)

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def put(self, key, value):
        """Store and return ``value``."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
