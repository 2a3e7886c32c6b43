"""Kafka's error names and codes, the vocabulary every answer is written in.

Owns: :class:`KafkaError` (``org.apache.kafka.common.protocol.Errors``, by name and code). A leaf:
:mod:`.fencing` answers in it and :mod:`.model`, which re-exports it, derives the verdict's
policy fields from :mod:`.fencing`'s table, so the errors cannot live in :mod:`.model`.
"""
from __future__ import annotations

import enum


class KafkaError(str, enum.Enum):
    """Kafka's error names and codes (``org.apache.kafka.common.protocol.Errors``)."""

    NONE = "NONE"
    COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
    COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
    NOT_COORDINATOR = "NOT_COORDINATOR"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    OFFSET_METADATA_TOO_LARGE = "OFFSET_METADATA_TOO_LARGE"
    ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    REBALANCE_IN_PROGRESS = "REBALANCE_IN_PROGRESS"
    UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
    GROUP_AUTHORIZATION_FAILED = "GROUP_AUTHORIZATION_FAILED"
    TOPIC_AUTHORIZATION_FAILED = "TOPIC_AUTHORIZATION_FAILED"
    INVALID_COMMIT_OFFSET_SIZE = "INVALID_COMMIT_OFFSET_SIZE"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    FENCED_INSTANCE_ID = "FENCED_INSTANCE_ID"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    STALE_MEMBER_EPOCH = "STALE_MEMBER_EPOCH"
    UNKNOWN = "UNKNOWN"

    @property
    def code(self) -> int:
        return _CODE_BY_ERROR[self]

    @classmethod
    def from_code(cls, code: int) -> "KafkaError":
        return _ERROR_BY_CODE.get(code, cls.UNKNOWN)


_CODE_BY_ERROR = {
    KafkaError.NONE: 0,
    KafkaError.REQUEST_TIMED_OUT: 7,
    KafkaError.OFFSET_METADATA_TOO_LARGE: 12,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: 14,
    KafkaError.COORDINATOR_NOT_AVAILABLE: 15,
    KafkaError.NOT_COORDINATOR: 16,
    KafkaError.UNKNOWN_TOPIC_OR_PARTITION: 3,
    KafkaError.ILLEGAL_GENERATION: 22,
    KafkaError.UNKNOWN_MEMBER_ID: 25,
    KafkaError.REBALANCE_IN_PROGRESS: 27,
    KafkaError.INVALID_COMMIT_OFFSET_SIZE: 28,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: 29,
    KafkaError.GROUP_AUTHORIZATION_FAILED: 30,
    KafkaError.GROUP_ID_NOT_FOUND: 69,
    KafkaError.FENCED_INSTANCE_ID: 82,
    KafkaError.FENCED_MEMBER_EPOCH: 110,
    KafkaError.STALE_MEMBER_EPOCH: 113,
    KafkaError.UNKNOWN: -1,
}
_ERROR_BY_CODE = {code: err for err, code in _CODE_BY_ERROR.items() if err is not KafkaError.UNKNOWN}
