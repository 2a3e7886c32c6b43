"""Topic ids -> names from cluster metadata, learned while running: for the decoders of the
records and lines that name topics by id (KIP-848 records, ConsumerGroupHeartbeat, OffsetCommit
v10, TxnOffsetCommit v6), which meet the ids of topics created after they started.

What lives here: :class:`MetadataTopicNames`, which teaches a ``TopicNames`` (any object with
``known(raw)`` and ``learn(raw, name)``) every topic's id, at most once per ``min_interval_s``.
Used by ``fencewatch bridge`` and by the job's Python workers (``state_fn.make_bridge_mapper``).
"""
from __future__ import annotations

import logging
import struct
import time
import uuid
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MetadataTopicNames", "NEW_ID_REFRESH_S", "TOPIC_REFRESH_S", "names_an_id", "names_learner"]

#: How often one process may ask cluster metadata again for topic ids it asked about and still
#: does not know (the job's workers): a deleted topic's id, say.
TOPIC_REFRESH_S = 10.0
#: How soon after its last ask a process asks about an id it has not asked about yet (a topic
#: created since): each of the job's workers learns on its own, and one that had just asked kept a
#: new topic's partitions under its UUID for up to TOPIC_REFRESH_S (the bar run of 2026-12-04:
#: 67 commit partitions so named). Once per new id, so no faster than ids appear.
NEW_ID_REFRESH_S = 0.5


def _uuid_bytes(topic_id: Any) -> bytes | None:
    """confluent-kafka's Uuid -> 16 bytes."""
    if topic_id is None:
        return None
    raw = struct.pack(">qq", topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits())
    return None if raw == bytes(16) else raw


class MetadataTopicNames:
    """Looks topic ids up in cluster metadata when the bridge meets an unknown one
    (at most once per ``min_interval_s``)."""

    def __init__(self, admin: Any, names: TopicNames, min_interval_s: float = 30.0, timeout_s: float = 10.0):
        self.admin, self.names = admin, names
        self.min_interval_s, self.timeout_s = min_interval_s, timeout_s
        self.last = float("-inf")

    def refresh(self) -> int:
        from confluent_kafka import TopicCollection

        self.last = time.monotonic()
        try:
            topics = list(self.admin.list_topics(timeout=self.timeout_s).topics)
            futures = self.admin.describe_topics(TopicCollection(topics), request_timeout=self.timeout_s)
        except Exception as exc:
            log.warning("topic metadata: %s", exc)
            return 0
        learned = 0
        for name, fut in futures.items():
            try:
                raw = _uuid_bytes(fut.result().topic_id)
            except Exception as exc:
                log.debug("describe_topics %s: %s", name, exc)
                continue
            if raw is not None and not self.names.known(raw):
                self.names.learn(raw, name)
                learned += 1
        return learned

    def maybe_refresh(self) -> None:
        if time.monotonic() - self.last >= self.min_interval_s:
            self.refresh()




def names_learner(names: Any, metadata: dict[str, str] | None):
    """A worker's ``learn() -> bool`` for ``names``: asks cluster metadata (an admin client of the
    ``metadata`` settings, made at the first call) for every topic's id: at most every
    :data:`TOPIC_REFRESH_S`, or :data:`NEW_ID_REFRESH_S` after the last ask when ``names`` met an
    id not asked about yet; True when a name was learned (decode again). ``metadata`` None: never."""
    made: list[MetadataTopicNames] = []
    asked: set[bytes] = set()  # the unresolved ids asked about already

    def learn() -> bool:
        if metadata is None:
            return False
        if not made:
            from confluent_kafka.admin import AdminClient

            made.append(MetadataTopicNames(AdminClient(dict(metadata)), names))
        missed = getattr(names, "missed", None)
        new = bool(missed) and not missed <= asked
        since = time.monotonic() - made[0].last
        if since < TOPIC_REFRESH_S and not (new and since >= NEW_ID_REFRESH_S):
            return False
        if missed:
            if len(asked) > 10_000:
                asked.clear()
            asked.update(missed)
            missed.clear()
        return made[0].refresh() > 0

    return learn


def names_an_id(events: list[dict[str, Any]]) -> bool:
    """Whether a decoded event names a topic by its id (a UUID string: no name was known for it)."""
    for e in events:
        for key in ("assigned", "pending_revocation", "subscribed_topics"):
            for tp in e.get(key) or ():
                t = tp["topic"] if isinstance(tp, dict) else tp
                if len(t) == 36 and t.count("-") == 4:
                    try:
                        uuid.UUID(t)
                        return True
                    except ValueError:
                        pass
    return False
