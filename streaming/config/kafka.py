"""Kafka client settings: Spark's ``kafka.*`` options <-> librdkafka, and redaction.

What lives here: the translation of the Java consumer settings users pass to
Spark's Kafka source (``kafka.security.protocol``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location`` ...) into librdkafka settings for
confluent-kafka, the reverse for handing librdkafka-style settings to
``format("kafka")``, and :func:`redact` for logging configs without secrets.

Names that are the same in both clients pass through unchanged and librdkafka
validates them. Java-only settings with a librdkafka equivalent are renamed;
those without one fail with a message saying what to use instead. Settings
the source manages itself (offset reset, auto commit, deserializers) are
refused as Spark's own Kafka source refuses them.

Imports: standard library and ``streaming.redaction`` only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fencewatch.streaming.config.redaction import REDACTED, is_secret_key, redact_mapping  # noqa: F401 (re-exported)


class KafkaConfigError(ValueError):
    """A ``kafka.*`` option that cannot be used; the message says what to do instead."""


def redact(config: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``config`` safe to log (the one redactor: ``streaming.redaction``)."""
    return redact_mapping(config)


# Settings the source owns; a user value would break offset tracking.
_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets (earliest, latest or JSON) instead; "
    "a running query resumes from the offsets in its Spark checkpoint",
    "key.deserializer": "keys are always returned as bytes; decode them with DataFrame operations",
    "value.deserializer": "values are always returned as bytes; decode them with DataFrame operations",
    "enable.auto.commit": "offsets live in the Spark checkpoint; the source never commits to Kafka",
    "enable.auto.offset.store": "offsets live in the Spark checkpoint; the source never commits to Kafka",
    "interceptor.classes": "interceptors could change records and are Java classes librdkafka cannot load",
    "enable.partition.eof": "the source decides when a range is read by offsets, not by EOF events",
    "sasl.client.callback.handler.class": "Java callback classes cannot be loaded by librdkafka",
    "sasl.login.callback.handler.class": "Java callback classes cannot be loaded by librdkafka; "
    "for OAUTHBEARER use kafka.sasl.oauthbearer.method=oidc with its client id/secret settings",
    "sasl.login.class": "Java classes cannot be loaded by librdkafka",
    "security.providers": "Java security providers cannot be loaded by librdkafka",
    "ssl.engine.factory.class": "Java classes cannot be loaded by librdkafka",
}

# Java consumer tuning knobs with no librdkafka meaning for this source: accepted
# so a job's options work unchanged on both sources, and reported as ignored.
IGNORED_JAVA_SETTINGS = frozenset({
    "max.poll.records",
    "default.api.timeout.ms",
    "request.timeout.ms",
    "key.deserializer.encoding",
    "value.deserializer.encoding",
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.truststore.password",
})

# Same meaning, different name.
_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}
_JAVA_NAMES = {rd: java for java, rd in _RENAMED.items()}  # to_java's way back

_JAAS_MODULE = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\s*(?P<opts>.*?)\s*;?\s*$",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r'(?P<key>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def parse_jaas_credentials(jaas: str) -> tuple[str, str]:
    """``(username, password)`` from a PLAIN or SCRAM ``sasl.jaas.config`` line.

    librdkafka has no JAAS; these two login modules only carry a user name and
    password, which map onto ``sasl.username``/``sasl.password``. The error
    never echoes the value (it holds a password).
    """
    match = _JAAS_MODULE.match(jaas)
    if not match:
        raise KafkaConfigError("kafka.sasl.jaas.config is not a JAAS line of the form "
                               "'<LoginModule> required key=\"value\" ...;'")
    module = match.group("module")
    if module not in (_PLAIN, _SCRAM):
        hint = {
            "com.sun.security.auth.module.Krb5LoginModule":
                "for GSSAPI set kafka.sasl.kerberos.keytab, kafka.sasl.kerberos.principal and "
                "kafka.sasl.kerberos.service.name",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule":
                "for OAUTHBEARER set kafka.sasl.oauthbearer.method=oidc, "
                "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and "
                "kafka.sasl.oauthbearer.token.endpoint.url",
        }.get(module, "use kafka.sasl.username / kafka.sasl.password or librdkafka's own SASL settings")
        raise KafkaConfigError(f"kafka.sasl.jaas.config with {module} cannot be translated for librdkafka; {hint}")
    options: dict[str, str] = {}
    for opt in _JAAS_OPTION.finditer(match.group("opts")):
        value = opt.group("quoted")
        if value is not None:
            value = re.sub(r"\\(.)", r"\1", value)
        else:
            value = opt.group("bare")
        options[opt.group("key")] = value
    if "username" not in options or "password" not in options:
        raise KafkaConfigError(f"kafka.sasl.jaas.config with {module} must set username and password")
    return options["username"], options["password"]


def to_librdkafka(kafka_options: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """librdkafka settings for Java-style ``kafka.*`` options (prefix already removed).

    Returns ``(config, ignored)``: the client config, and the Java settings
    that were accepted but have no effect here (for one warning at startup).
    Raises :class:`KafkaConfigError` for settings that cannot work.
    """
    options = {k.strip().lower(): str(v) for k, v in kafka_options.items()}
    config: dict[str, str] = {}
    ignored: list[str] = []
    for key, value in options.items():
        if key in _REFUSED:
            raise KafkaConfigError(f"Kafka option 'kafka.{key}' is not supported: {_REFUSED[key]}")
        if key in IGNORED_JAVA_SETTINGS:
            ignored.append(key)
            continue
        if key in _RENAMED:
            config[_RENAMED[key]] = value
            continue
        if key == "sasl.jaas.config":
            username, password = parse_jaas_credentials(value)
            for k, v in (("sasl.username", username), ("sasl.password", password)):
                if k in options and options[k] != v:
                    raise KafkaConfigError(f"kafka.sasl.jaas.config and kafka.{k} disagree; set only one")
                config[k] = v
            continue
        if key == "ssl.truststore.location":
            kind = options.get("ssl.truststore.type", "JKS").upper()
            if kind != "PEM":
                raise KafkaConfigError(
                    f"kafka.ssl.truststore.location with ssl.truststore.type={kind}: librdkafka reads "
                    "CA certificates from PEM files; export them (keytool -exportcert -rfc) and set "
                    "kafka.ssl.ca.location, or set kafka.ssl.truststore.type=PEM")
            config["ssl.ca.location"] = value
            continue
        if key == "ssl.keystore.location":
            kind = options.get("ssl.keystore.type", "JKS").upper()
            if kind == "PKCS12":
                config["ssl.keystore.location"] = value
            elif kind == "PEM":
                config["ssl.certificate.location"] = value
                config["ssl.key.location"] = value
            else:
                raise KafkaConfigError(
                    f"kafka.ssl.keystore.location with ssl.keystore.type={kind}: librdkafka reads PKCS#12 "
                    "keystores or PEM files; set kafka.ssl.keystore.type=PKCS12, or use "
                    "kafka.ssl.certificate.location and kafka.ssl.key.location")
            continue
        if key == "ssl.endpoint.identification.algorithm" and value.strip() == "":
            config[key] = "none"  # Java's empty string disables host name checks
            continue
        if key == "sasl.mechanism":
            config["sasl.mechanisms"] = value
            continue
        config[key] = value
    return config, ignored


def to_java(kafka_options: Mapping[str, str]) -> dict[str, str]:
    """Java consumer settings for librdkafka-style ``kafka.*`` options.

    Used when Spark's own connector reads: ``sasl.username``/``sasl.password``
    become a PLAIN or SCRAM ``sasl.jaas.config``, ``ssl.ca.location`` a PEM
    truststore, a PEM certificate and key in one file a PEM keystore, a
    librdkafka keystore a PKCS#12 one. Everything else passes through unchanged.
    """
    options = {k.strip().lower(): str(v) for k, v in kafka_options.items()}
    java: dict[str, str] = {}
    mechanism = options.get("sasl.mechanism") or options.get("sasl.mechanisms")
    cert, key_file = options.get("ssl.certificate.location"), options.get("ssl.key.location")
    if cert or key_file:
        if cert != key_file:
            raise KafkaConfigError(
                "kafka.ssl.certificate.location and kafka.ssl.key.location: Java's PEM keystore reads the "
                "private key and its certificate chain from one file; concatenate them and name that file "
                "in both, or use a PKCS#12 keystore (kafka.ssl.keystore.location)")
        java["ssl.keystore.type"] = "PEM"
        java["ssl.keystore.location"] = cert
    for key, value in options.items():
        if key in ("sasl.username", "sasl.password", "ssl.certificate.location", "ssl.key.location"):
            continue
        if key == "ssl.keystore.location":
            java.setdefault("ssl.keystore.type", "PKCS12")  # the only keystore librdkafka reads
        if key == "sasl.mechanisms":
            java["sasl.mechanism"] = value
        elif key == "ssl.ca.location":
            java["ssl.truststore.type"] = "PEM"
            java["ssl.truststore.location"] = value
        elif key == "ssl.endpoint.identification.algorithm" and value.lower() == "none":
            java[key] = ""
        elif key in _JAVA_NAMES:  # librdkafka's name for a Java setting: Java's own again
            java[_JAVA_NAMES[key]] = value
        else:
            java[key] = value
    if "sasl.username" in options or "sasl.password" in options:
        if "sasl.jaas.config" in options:
            raise KafkaConfigError("set either kafka.sasl.jaas.config or kafka.sasl.username/password, not both")
        module = _SCRAM if (mechanism or "").upper().startswith("SCRAM") else _PLAIN
        user = _jaas_quote(options.get("sasl.username", ""))
        password = _jaas_quote(options.get("sasl.password", ""))
        java["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    return java


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
