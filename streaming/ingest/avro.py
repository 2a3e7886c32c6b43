"""Avro input events (contract §1): a Kafka record's bytes -> the event's fields, or a dead letter.

What lives here: :func:`avro_record_dict` (the wire format, the fixed schema ids or the Schema
Registry, the body) and :func:`decode_avro_record` (that, then the general path's decoders).
The schema and its compiled codec are ``state.avro_codec``'s (the simulator writes with them
too); :func:`parsed_schema` gives fastavro's form, the reference the codec is checked against
and the reader schema for records whose writer schema comes from the registry.

May import: ``state``, the other ``ingest`` decoders; fastavro and the codec only when Avro is
read (JSON input never compiles the codec).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from fencewatch.streaming.ingest.builders import event_from_dict
from fencewatch.streaming.ingest.fields import DecodeError, bounded, oversized


@lru_cache(maxsize=1)
def parsed_schema() -> dict[str, Any]:
    """``fastavro.parse_schema`` of the event schema."""
    import fastavro

    from fencewatch.state.avro_codec import EVENT_SCHEMA

    return fastavro.parse_schema(EVENT_SCHEMA)


def decode_avro_record(data: bytes, *, seq: int, default_event_id: str, coords: str,
                       schema_ids: frozenset[int] = frozenset({1}), registry=None):
    """Confluent wire format (magic 0 + schema id + body) or a plain Avro body; the same fields as JSON.
    With ``registry`` (a ``schema_registry.RegistryEventDecoder``) Confluent records take their
    schema from the Schema Registry instead of the fixed ``schema_ids``."""
    too_large = oversized(len(data), coords)
    if too_large is not None:
        return too_large
    d = avro_record_dict(data, coords=coords, schema_ids=schema_ids, registry=registry)
    if isinstance(d, DecodeError):
        return d
    return bounded(event_from_dict(d, seq=seq, default_event_id=default_event_id, coords=coords), len(data), coords)


def avro_record_dict(data: bytes, *, coords: str, schema_ids: frozenset[int] = frozenset({1}), registry=None):
    """An Avro record's fields as a dict (what ``event_from_dict`` reads), or a :class:`DecodeError`
    (wire format, schema id, Schema Registry). The router turns the dict into JSON for the state
    function, so that only the edge knows Avro (``streaming.runtime.routing``)."""
    from fencewatch.state.avro_codec import AvroWireError, decode_avro  # compiled when Avro is first read

    if not data:
        return DecodeError("INVALID_AVRO", {"problem": "empty record"}, coords)
    # A plain body starts with the length of the non-empty ``type`` string, never 0.
    wire = "confluent" if data[0] == 0 else "plain"
    if wire == "confluent" and registry is not None:
        from fencewatch.streaming.ingest.schema_registry import RegistryDecodeError

        try:
            return registry.decode(data)
        except RegistryDecodeError as exc:  # RegistryUnavailable propagates: the batch is retried
            return DecodeError(exc.code, exc.params, coords)
    if wire == "confluent" and len(data) >= 5:
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id not in schema_ids:
            return DecodeError("UNKNOWN_SCHEMA_ID", {"schema_id": str(schema_id),
                                                     "known": ",".join(map(str, sorted(schema_ids)))}, coords)
    try:
        return decode_avro(data, wire=wire)
    except (AvroWireError, ValueError) as exc:
        return DecodeError("INVALID_AVRO", {"problem": str(exc)[:200]}, coords)
