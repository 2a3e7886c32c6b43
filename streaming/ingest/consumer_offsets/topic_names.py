"""Topic ids to names for the coordinator records that name a topic by id (OffsetCommit v4,
KIP-848 assignment records), as ``__consumer_offsets`` readers and the request-log bridge
resolve them (contract §9).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from fencewatch.streaming.ingest.consumer_offsets.records import parse_topic_id, uuid_to_standard_string

__all__ = ["TopicNames", "load_topic_ids"]


class TopicNames:
    """Topic id (16 bytes) -> name. Seeded from cluster metadata or a file
    (keys in Kafka's base64 form or as standard UUID strings), extended with
    what the records themselves reveal; an unknown id resolves to its standard
    UUID string (contract §9)."""

    __slots__ = ("_names", "missed")

    def __init__(self, initial: Mapping[Any, str] | None = None) -> None:
        self._names: dict[bytes, str] = {}
        # ids met and not resolved, for a live caller to ask cluster metadata about the new ones
        # (``topic_metadata.names_learner``), which empties it
        self.missed: set[bytes] = set()
        for k, v in (initial or {}).items():
            self._names[k if isinstance(k, bytes) else parse_topic_id(str(k))] = v

    def resolve(self, raw: bytes) -> str:
        name = self._names.get(raw)
        if name is not None:
            return name
        if len(self.missed) < 1024:  # bounded where nobody empties it (an offline bridge)
            self.missed.add(raw)
        return uuid_to_standard_string(raw)

    def learn(self, raw: bytes, name: str) -> None:
        if raw != bytes(16) and name:
            self._names[raw] = name

    def get(self, raw: bytes) -> str | None:
        return self._names.get(raw)

    def known(self, raw: bytes) -> bool:
        return raw in self._names

    def __len__(self) -> int:
        return len(self._names)


def load_topic_ids(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError("expected a JSON object of topic id -> topic name")
    TopicNames(data)  # validates every id
    return data
