"""librdkafka's settings for the source's clients: the driver's admin client and the executors' consumers.

What lives here: :class:`ReadSpec` (what an executor needs to read any range of one query, pickled
into each input partition), :func:`consumer_config` (the consumer settings this source fixes over
the user's), :class:`ClientLog` (librdkafka's log, kept so a timeout can say why) and the error
codes no retry can fix.

Imports: the standard library, confluent_kafka (inside functions) and this package's options.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fencewatch.streaming.config.kafka import redact
from fencewatch.streaming.sources.kafka.options import SHORT_NAME, KafkaSourceError, SourceOptions

#: The logger librdkafka's own lines go to (named in ``streaming.config.logsetup``).
CLIENT_LOGGER = "fencewatch.streaming.sources.kafka.librdkafka"


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """What an executor needs to read any range of one query; secrets redacted in repr."""

    client_config: tuple[tuple[str, str], ...]
    group_id: str
    isolation_level: str
    fail_on_data_loss: bool
    poll_timeout_ms: int
    include_headers: bool
    include_caught_up: bool = False

    def __repr__(self) -> str:
        return (f"ReadSpec(client_config={redact(dict(self.client_config))}, group_id={self.group_id!r}, "
                f"isolation_level={self.isolation_level!r}, fail_on_data_loss={self.fail_on_data_loss})")

    @classmethod
    def of(cls, options: SourceOptions) -> ReadSpec:
        return cls(options.client_config, options.group_id, options.isolation_level,
                   options.fail_on_data_loss, options.poll_timeout_ms, options.include_headers,
                   options.include_caught_up)


class ClientLog:
    """librdkafka's ``logger``: forwards to logging and keeps the last error lines.

    Failures such as a TLS handshake against a plaintext listener are only
    logged by librdkafka, never raised; keeping them lets a timeout say why.
    """

    _logger = logging.getLogger(CLIENT_LOGGER)

    def __init__(self) -> None:
        self.errors: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self._logger.log(level, fmt, *args)
        if level >= logging.ERROR or (level >= logging.WARNING and "FAIL" in str(args[:1])):
            self.errors.append(fmt % args if args else fmt)
            del self.errors[:-3]

    def last(self) -> str:
        return "; ".join(self.errors) or "none"


READ_AHEAD_MESSAGES = 2_000
"""librdkafka's prefetch per partition (``queued.min.messages``) unless ``kafka.queued.min.messages``
says otherwise. Its default, 100,000, suits a consumer that reads on and on; a task reads a bounded
range and closes, and whatever the client fetched past the range's end was fetched, parsed and
served for nothing. With a small prefetch the client waits ``fetch.queue.backoff.ms`` (default
1 s) each time its queue is full before fetching again, and a task then crawled; so that wait is :data:`READ_AHEAD_BACKOFF_MS`. Both cut the reader's and the
broker's CPU per record (measured: docs/kafka-source.md, "Decisions")."""
READ_AHEAD_BACKOFF_MS = 5


def consumer_config(spec: ReadSpec, error_cb, client_log: ClientLog) -> dict[str, Any]:
    return {
        "queued.min.messages": READ_AHEAD_MESSAGES,
        "fetch.queue.backoff.ms": READ_AHEAD_BACKOFF_MS,
        **dict(spec.client_config),
        "group.id": spec.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "isolation.level": spec.isolation_level,
        "error_cb": error_cb,
        "logger": client_log,
    }


def validate_consumer_config(options: SourceOptions) -> None:
    """Build (and close) a consumer so librdkafka rejects bad settings on the driver, early."""
    from confluent_kafka import Consumer, KafkaException

    try:
        consumer = Consumer(consumer_config(ReadSpec.of(options), lambda err: None, ClientLog()))
    except (KafkaException, ValueError, TypeError) as exc:
        raise KafkaSourceError(f"invalid Kafka client settings for {SHORT_NAME}: {exc} "
                               f"(settings: {redact(options.config())})") from None
    consumer.close()


def _config_error_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL", "TOPIC_AUTHORIZATION_FAILED",
             "CLUSTER_AUTHORIZATION_FAILED", "_UNSUPPORTED_FEATURE", "ILLEGAL_SASL_STATE",
             "UNSUPPORTED_SASL_MECHANISM")
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


#: Errors retrying cannot fix: fail the task (or the planning) now rather than after pollTimeoutMs.
CONFIG_ERRORS = _config_error_codes()
