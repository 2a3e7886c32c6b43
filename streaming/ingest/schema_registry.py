"""Confluent Schema Registry for the Avro input events and the Avro alerts.

What lives here: :class:`RegistryEventDecoder` (input: the writer's schema found by the id in
each record's Confluent header, resolved against our ``FencewatchEvent`` reader schema, so
producers may evolve their schema compatibly) and :class:`RegistryAlertEncoder` (alerts: our
``FencewatchAlert`` schema registered or looked up under the alerts topic's subject, its id
stamped in each record), both confluent-kafka's ``AvroDeserializer`` / ``AvroSerializer`` over
its ``SchemaRegistryClient``. Without a registry URL nothing here is used: input ids are
checked against the fixed offline ids and alerts carry id 2 (docs/deploy.md).

Settings come from ``streaming.schema_registry`` (a mapping, like ``streaming.kafka``): the
``SchemaRegistryClient`` keys (``url``, ``basic.auth.user.info``, ``ssl.ca.location`` ...)
pass through; ``auto.register.schemas``, ``use.latest.version``, ``normalize.schemas`` go to
the alert serializer. ``url: mock://NAME`` is the library's in-memory registry (tests, demos).

A registry that cannot be reached is not bad input: :class:`RegistryUnavailable` is raised so
the micro-batch fails and Spark retries it; records are never dead-lettered for an outage.
An id the registry does not know, or a schema that does not resolve to ours, is bad input:
``UNKNOWN_SCHEMA_ID`` / ``INVALID_AVRO`` for the dead-letter topic.

Imports: confluent_kafka (schema_registry extra), fastavro, the standard library,
``event_schema`` (the reader schema). Clients are made lazily per process: a decoder pickled
to Spark's executors carries only its settings.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: Settings that configure the serializer, not the client.
SERDE_KEYS = ("auto.register.schemas", "use.latest.version", "normalize.schemas")
#: HTTP status of the registry's "not found" answers (its codes 40401 subject, 40403 schema; 40400
#: from the library's mock): the id is unknown there, the record is bad input.
NOT_FOUND_STATUS = 404


class RegistryDecodeError(ValueError):
    """A record the registry path cannot decode: ``code`` is the dead-letter reason."""

    def __init__(self, code: str, params: Mapping[str, str]):
        super().__init__(f"{code} {dict(params)}")
        self.code = code
        self.params = dict(params)


class RegistryUnavailable(RuntimeError):
    """The registry did not answer (network, 5xx, auth): fail the batch, lose nothing."""


def split_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``streaming.schema_registry`` -> (SchemaRegistryClient conf, serializer conf)."""
    client, serde = {}, {}
    for key, value in settings.items():
        if key in SERDE_KEYS:
            serde[key] = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        else:
            client[key] = value
    if not client.get("url"):
        raise ValueError("streaming.schema_registry.url is required to use a Schema Registry")
    return client, serde


def _new_client(conf: Mapping[str, Any]):
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:  # the schema_registry extra of confluent-kafka is missing
        raise ImportError("Schema Registry support needs confluent-kafka's schema registry extra: "
                          "pip install 'fencewatch[registry]'") from exc
    return SchemaRegistryClient.new_client(dict(conf))  # mock:// URLs give the library's mock client


def _schema_json(schema: Mapping[str, Any]) -> str:
    """An Avro schema as JSON, without fastavro's parse-time bookkeeping keys."""
    def clean(node):
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if not k.startswith("__")}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node
    return json.dumps(clean(schema), separators=(",", ":"))


def _drop_nulls(record: dict[str, Any]) -> dict[str, Any]:
    """As the fixed-id decoder does: an absent optional field is absent, not None."""
    return {k: v for k, v in record.items() if v is not None}


def _registry_error(exc: Exception) -> Exception:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError) and exc.http_status_code == NOT_FOUND_STATUS:
        return RegistryDecodeError("UNKNOWN_SCHEMA_ID", {"problem": exc.error_message[:200]})
    return RegistryUnavailable(f"Schema Registry: {exc}")


class RegistryEventDecoder:
    """Input events in the Confluent wire format, their schema from the registry."""

    def __init__(self, settings: Mapping[str, Any], *, client=None):
        self._client_conf, self._serde_conf = split_settings(settings)
        self._client = client
        self._deserializer = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_client_conf": self._client_conf, "_serde_conf": self._serde_conf}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _client=None, _deserializer=None)

    def _get(self):
        if self._deserializer is None:
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            from fencewatch.state.avro_codec import EVENT_SCHEMA

            if self._client is None:
                self._client = _new_client(self._client_conf)
            self._deserializer = AvroDeserializer(self._client, _schema_json(EVENT_SCHEMA))
        return self._deserializer

    def decode(self, data: bytes, topic: str = "") -> dict[str, Any]:
        """The event's fields; ``RegistryDecodeError`` for bad input, ``RegistryUnavailable`` otherwise."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError
        from fastavro.read import SchemaResolutionError

        deserializer = self._get()
        schema_id = int.from_bytes(data[1:5], "big") if len(data) >= 5 else None
        try:
            record = deserializer(data, SerializationContext(topic, MessageField.VALUE))
        except SchemaRegistryError as exc:
            err = _registry_error(exc)
            if isinstance(err, RegistryDecodeError):
                err.params["schema_id"] = str(schema_id)
            raise err from None
        except SchemaResolutionError:
            raise RegistryDecodeError("INVALID_AVRO", {
                "schema_id": str(schema_id),
                "problem": "the writer's schema does not resolve to io.fencewatch.FencewatchEvent"}) from None
        except SerializationError as exc:
            raise RegistryDecodeError("INVALID_AVRO", {"problem": str(exc)[:200]}) from None
        except (ValueError, TypeError, EOFError, IndexError, KeyError) as exc:
            # fastavro: truncated body, or a writer schema that does not resolve to ours
            raise RegistryDecodeError("INVALID_AVRO", {"problem": f"{type(exc).__name__}: {exc}"[:200]}) from None
        except Exception as exc:  # httpx / socket errors: the registry, not the record
            raise RegistryUnavailable(f"Schema Registry: {type(exc).__name__}: {exc}") from exc
        if not isinstance(record, dict):
            raise RegistryDecodeError("INVALID_AVRO", {"problem": "not an Avro record"})
        return _drop_nulls(record)


class RegistryAlertEncoder:
    """Alerts in the Confluent wire format under the alerts topic's subject (``<topic>-value``)."""

    def __init__(self, settings: Mapping[str, Any], *, client=None):
        self._client_conf, self._serde_conf = split_settings(settings)
        self._client = client
        self._serializer = None

    def _get(self):
        if self._serializer is None:
            from confluent_kafka.schema_registry.avro import AvroSerializer

            import fastavro

            from fencewatch.state.records import alert_avro_schema

            if self._client is None:
                self._client = _new_client(self._client_conf)
            schema = fastavro.parse_schema(alert_avro_schema())  # the one declaration of an alert
            self._serializer = AvroSerializer(self._client, _schema_json(schema), conf=dict(self._serde_conf))
        return self._serializer

    def __call__(self, alert: Mapping[str, Any], topic: str) -> bytes:
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        serializer = self._get()
        try:
            return serializer(dict(alert), SerializationContext(topic, MessageField.VALUE))
        except SchemaRegistryError as exc:
            raise RegistryUnavailable(f"Schema Registry, subject {topic}-value: {exc}") from exc


def probe_registry(settings: Mapping[str, Any], subject: str, *, timeout_s: float = 10.0) -> tuple[int, int | None]:
    """Whether the registry answers these settings: (how many subjects it lists, the latest
    version of ``subject`` or None when it has none). One try, ``timeout_s`` per request;
    :class:`RegistryUnavailable` with the library's reason otherwise (``fencewatch doctor``)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    conf, _ = split_settings(settings)
    conf = {"timeout": timeout_s, "max.retries": 0, **conf}
    client = _new_client(conf)
    try:
        subjects = client.get_subjects()
    except SchemaRegistryError as exc:
        raise RegistryUnavailable(f"HTTP {exc.http_status_code}: {exc.error_message}") from None
    except Exception as exc:  # httpx / socket errors: not reachable
        raise RegistryUnavailable(f"{type(exc).__name__}: {exc}") from None
    if subject not in subjects:
        return len(subjects), None
    try:
        return len(subjects), client.get_latest_version(subject).version
    except Exception as exc:
        raise RegistryUnavailable(f"subject {subject}: {type(exc).__name__}: {exc}") from None
