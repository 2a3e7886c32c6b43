"""``fencewatch.streaming.bridge``: the group coordinator's ``__consumer_offsets``
records -> SPEC events (see README.md in this folder).

Pure parts (no I/O): ``records`` (decoder), ``protocol`` (embedded consumer
protocol), ``mapping`` (``Bridge``, ``decode_record``), ``request_log``
(``RequestLogBridge``: broker request-log lines). I/O: ``poller``
(partition facts), ``command`` (``fencewatch bridge``).
"""

from .mapping import Bridge, BridgeStats, TopicNames, decode_record, event_role
from .records import CoordinatorRecord, RecordDecodeError, decode, kafka_json
from .request_log import RequestLogBridge

__all__ = [
    "Bridge",
    "BridgeStats",
    "TopicNames",
    "decode_record",
    "event_role",
    "CoordinatorRecord",
    "RecordDecodeError",
    "decode",
    "kafka_json",
    "RequestLogBridge",
]
