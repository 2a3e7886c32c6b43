"""Value checks the Config runs before anything starts: each returns a problem line or None.

What lives here: pure checks of one value each (a port, the brokers list, a
``startingOffsets`` JSON) and :func:`librdkafka_problem`, which asks librdkafka itself
whether it accepts the translated client settings, so a value it would refuse when the
first client is built (``security.protocol=SASL_SSLX``) is refused by ``--print-config``
and ``doctor``'s config line too. Why librdkafka and not a table of valid values: it
knows every property and enum of the version installed, and a table would drift.

Imports: standard library, and confluent-kafka inside :func:`librdkafka_problem` only.
"""
from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any, Mapping

#: Spark's sentinels inside a startingOffsets JSON (as ``sources.kafka.options``).
EARLIEST, LATEST = -2, -1
OFFSETS_SHAPES = ("'earliest', 'latest' or JSON per topic and partition like "
                  '{"orders":{"0":23,"1":-2}} (-2: earliest, -1: latest)')


def port_problem(name: str, value: Any, *, zero: str | None = None) -> str | None:
    """A TCP port: 1-65535, and 0 when ``zero`` says what it means (any free port)."""
    if value is None:
        return None
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        what = f"0 ({zero}) or 1-65535" if zero else "1-65535"
        return f"{name} must be a port, {what}; got {value!r}"
    return None


def bootstrap_problem(name: str, text: str) -> str | None:
    """``host:port[,host:port]`` (a ``PROTOCOL://`` prefix allowed, as librdkafka allows)."""
    entries = [e.strip() for e in str(text).split(",")]
    if not any(entries):
        return f"{name} is empty; valid: host:port[,host:port...]"
    for entry in entries:
        if not entry:
            return f"{name} {text!r} has an empty entry; valid: host:port[,host:port...]"
        address = entry.split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if not sep or not host.strip("[]"):
            return f"{name}: {entry!r} is not host:port"
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            return f"{name}: {entry!r} has no valid port (1-65535)"
    return None


def offsets_problem(name: str, text: str) -> str | None:
    """``earliest``, ``latest`` or ``{"topic": {"partition": offset}}`` as Spark's Kafka source reads it."""
    raw = str(text).strip()
    if raw.lower() in ("earliest", "latest"):
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        return f"{name} {raw!r} is not valid JSON ({getattr(exc, 'msg', exc)}); valid: {OFFSETS_SHAPES}"
    if not isinstance(parsed, dict) or not parsed:
        return f"{name} {raw!r} is not an object of topics; valid: {OFFSETS_SHAPES}"
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            return f"{name}: topic {topic!r} must map partitions to offsets; valid: {OFFSETS_SHAPES}"
        for partition, offset in partitions.items():
            if not str(partition).isdigit():
                return f"{name}: partition {partition!r} of {topic!r} is not a partition number"
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                return (f"{name}: the offset of {topic}[{partition}] must be >= 0, -2 (earliest) or "
                        f"-1 (latest), got {offset!r}")
    return None


def librdkafka_problem(client: Mapping[str, str]) -> str | None:
    """What librdkafka says of these settings when a client is built from them, or None.

    A producer handle without ``bootstrap.servers`` connects nowhere; it is destroyed at
    once. Settings that would act at construction are neutralised in the copy checked:
    the Kerberos ``kinit`` command and an OIDC token request."""
    return _librdkafka_problem(tuple(sorted((str(k), str(v)) for k, v in client.items())))


_QUIET = logging.getLogger("fencewatch.kafka.validation")
_QUIET.propagate = False
_QUIET.addHandler(logging.NullHandler())


@lru_cache(maxsize=16)
def _librdkafka_problem(items: tuple[tuple[str, str], ...]) -> str | None:
    try:
        import confluent_kafka
    except ImportError:  # nothing to build a client with: nothing would refuse the settings either
        return None
    conf = dict(items)
    if "sasl.kerberos.kinit.cmd" in conf or "GSSAPI" in conf.get("sasl.mechanisms", "").upper():
        conf["sasl.kerberos.kinit.cmd"] = "true"
    method = conf.get("sasl.oauthbearer.method", "").strip().lower()
    if method not in ("", "default", "oidc"):
        return f"Invalid value {method!r} for configuration property \"sasl.oauthbearer.method\"; valid: default, oidc"
    if method == "oidc":
        conf["sasl.oauthbearer.method"] = "default"
        conf = {k: v for k, v in conf.items() if not k.startswith("sasl.oauthbearer.")}
    conf.pop("bootstrap.servers", None)
    try:
        handle = confluent_kafka.Producer({**conf, "logger": _QUIET})
    except confluent_kafka.KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return str(err.str() if hasattr(err, "str") else err)
    except (TypeError, ValueError) as exc:
        return str(exc)
    del handle
    return None
