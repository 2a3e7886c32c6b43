"""The driver's view of Kafka: which partitions a subscription covers and their offsets.

What lives here: :class:`OffsetReader`, metadata and ListOffsets through one AdminClient, with
``fetchOffset.numRetries`` retries and errors that say why (the client's last log lines, the
settings with secrets redacted). Used by the planner on the driver only (not picklable).

Imports: the standard library, confluent_kafka and this package.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from typing import Any, Literal

from fencewatch.streaming.config.kafka import redact
from fencewatch.streaming.sources.kafka.client import CONFIG_ERRORS, ClientLog, validate_consumer_config
from fencewatch.streaming.sources.kafka.options import SourceOptions, TopicPartitionKey

log = logging.getLogger(__name__)


class OffsetReader:
    """Driver-side metadata and ListOffsets through one AdminClient (not picklable)."""

    def __init__(self, options: SourceOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self._options = options
        config = options.config()
        validate_consumer_config(options)
        self._client_log = ClientLog()
        self._config_errors: list[Any] = []

        def on_error(err) -> None:
            if err.fatal() or err.code() in CONFIG_ERRORS:
                self._config_errors.append(err)

        self._admin = AdminClient({**config, "logger": self._client_log, "error_cb": on_error})
        # Per request; with fetchOffset.numRetries a dead bootstrap fails in minutes, not hours.
        self._timeout_s = min(30.0, max(1.0, options.poll_timeout_ms / 1000.0))
        self._missing_logged: set[str] = set()

    def partitions(self) -> tuple[set[TopicPartitionKey], set[str]]:
        """Partitions the subscription covers now, and topics whose metadata errored (unknown)."""
        metadata = self._retry("metadata", lambda: self._admin.list_topics(timeout=self._timeout_s))
        found: set[TopicPartitionKey] = set()
        unknown: set[str] = set()
        opts = self._options
        if opts.subscribe:
            wanted = set(opts.subscribe)
        elif opts.subscribe_pattern is not None:
            regex = re.compile(opts.subscribe_pattern)
            wanted = {t for t in metadata.topics if regex.fullmatch(t)}
        else:
            wanted = {t for t, _ in opts.assign}
        for topic in sorted(wanted):
            meta = metadata.topics.get(topic)
            if meta is None:
                if topic not in self._missing_logged:
                    log.info("topic %s does not exist (yet); it is read from its earliest offset once it does", topic)
                    self._missing_logged.add(topic)
                continue
            if meta.error is not None:
                unknown.add(topic)
                log.warning("metadata for topic %s failed this round: %s", topic, meta.error)
                continue
            for p in meta.partitions:
                found.add((topic, p))
        if opts.assign:
            found &= set(opts.assign)
        return found, unknown

    def list_offsets(self, tps: Iterable[TopicPartitionKey], which: Literal["earliest", "latest"],
                     isolation_level: str | None = None) -> dict[TopicPartitionKey, int]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = sorted(set(tps))
        if not tps:
            return {}
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        level = IsolationLevel.READ_COMMITTED if (isolation_level or self._options.isolation_level) == \
            "read_committed" else IsolationLevel.READ_UNCOMMITTED

        def query() -> dict[TopicPartitionKey, int]:
            futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                               isolation_level=level, request_timeout=self._timeout_s)
            result = {}
            for tp, future in futures.items():
                offset = future.result(timeout=self._timeout_s).offset
                if offset < 0:
                    raise RuntimeError(f"broker answered offset {offset} for {tp.topic}[{tp.partition}]")
                result[(tp.topic, tp.partition)] = offset
            return result

        return self._retry(f"{which} offsets", query)

    def _retry(self, what: str, call):
        attempts = self._options.fetch_offset_num_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except Exception as exc:
                self._admin.poll(0)  # deliver queued client logs and error callbacks
                if self._config_errors:
                    raise RuntimeError(
                        f"could not fetch {what} from Kafka: {self._config_errors[0]} (check "
                        f"kafka.security.protocol, SASL and SSL settings: {redact(self._options.config())})"
                    ) from exc
                if attempt >= attempts:
                    raise RuntimeError(
                        f"could not fetch {what} from Kafka ({self._options.describe_subscription()}) after "
                        f"{attempts} attempts: {exc}; last client errors: {self._client_log.last()}") from exc
                log.debug("fetching %s failed (attempt %d): %s", what, attempt, exc)
                time.sleep(self._options.fetch_offset_retry_interval_ms / 1000.0)
        raise AssertionError("unreachable")

