"""Broker request-log lines from the simulator's contract events (``simulate --format request-log``).

What lives here: the public face of the encoder, which turns a simulation's
event stream into the lines an Apache Kafka broker's ``kafka.request.logger``
writes at DEBUG (contract §10), so the real-cluster path (request-log lines
-> ``RequestLogBridge`` -> the monitor) can be fed and tested without a
cluster. Its parts, one module each: :mod:`.encoder` (event order, what is
carried or skipped), :mod:`.commits` and :mod:`.heartbeats` (one line
builder per API), :mod:`.members` (the broker's view of each member),
:mod:`.versions` (broker releases and the version mix) and :mod:`.wire` (the
line's frame, topic ids). Pure: no I/O, no clock; what the event stream
does not determine is derived from crc32 of names, never drawn at random.
"""

from fencewatch.sim.request_log.encoder import RequestLogEncoder, simulated_topic_ids
from fencewatch.sim.request_log.versions import DEFAULT_BROKER_VERSIONS, RELEASES, Release, parse_broker_versions
from fencewatch.sim.request_log.wire import log_line, topic_id, topic_id_uuid

__all__ = [
    "DEFAULT_BROKER_VERSIONS",
    "RELEASES",
    "Release",
    "RequestLogEncoder",
    "log_line",
    "parse_broker_versions",
    "simulated_topic_ids",
    "topic_id",
    "topic_id_uuid",
]
