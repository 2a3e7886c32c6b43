"""Topic ids to names, for the requests that name topics by id (OffsetCommit v10, TxnOffsetCommit
v6, every ConsumerGroupHeartbeat).

What lives here: ``TopicIds``, the bridge's part that resolves Kafka's base64url ids through a
shared ``TopicNames`` (which a live caller can teach names), remembering each id's answer until
names are learned; an id without a name is written as its standard UUID string and counted in
``unresolved_ids`` (live callers then refresh their metadata).
"""

from __future__ import annotations

from typing import Mapping

from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames
from fencewatch.streaming.ingest.consumer_offsets.records import parse_topic_id, uuid_to_standard_string
from fencewatch.streaming.ingest.request_log.problems import Broken

_MAX_IDS = 100_000


class TopicIds:
    """Resolves topic ids for a ``RequestLogBridge``."""

    topic_names: TopicNames
    unresolved_ids: int
    _ids: dict[str, str]

    def _init_topic_ids(self, topic_ids: Mapping[str, str] | TopicNames | None) -> None:
        self.topic_names = topic_ids if isinstance(topic_ids, TopicNames) else TopicNames(topic_ids)
        self.unresolved_ids = 0  # topic ids met that no name is known for (live callers refresh metadata)
        self._ids = {}
        # TopicNames' own dict, so that "names learned since?" is a len() in C per resolved id
        # (TopicNames.__len__ is a Python call, a visible share of a v10 commit's time)
        self._name_table = self.topic_names._names
        self._ids_known = len(self._name_table)

    def _resolve(self, topic_id: str) -> str:
        """Kafka's base64url id -> the topic's name, or its standard UUID string if unknown."""
        if self._ids_known != len(self._name_table):  # names learned since: forget the misses
            self._ids.clear()
            self._ids_known = len(self._name_table)
        name = self._ids.get(topic_id)
        if name is None:
            try:
                raw = parse_topic_id(topic_id)
            except (ValueError, TypeError) as exc:
                raise Broken("BAD_TOPIC_ID", f"{topic_id[:40]!r}: {exc}") from None
            name = self.topic_names.get(raw)
            if name is None:
                self.unresolved_ids += 1
                if len(self.topic_names.missed) < 1024:
                    self.topic_names.missed.add(raw)
                name = uuid_to_standard_string(raw)
            if len(self._ids) > _MAX_IDS:
                self._ids.clear()
            self._ids[topic_id] = name
        return name
