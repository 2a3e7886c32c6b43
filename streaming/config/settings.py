"""One typed configuration, loaded from defaults < file < environment < flags.

The tree mirrors the package tree (kminion's habit): ``Config(streaming,
state, sinks, logging)``. A config file is strict (unknown keys are errors that
list the valid ones); the environment is lenient (``FENCEWATCH_<SECTION>__<KEY>``,
unknown names are ignored with a warning). Mapping settings (``streaming.kafka``,
``streaming.spark_conf``) merge key by key across the layers, so ``-X`` adds to
the password given in the environment instead of replacing it. Secrets are
redacted whenever the config is shown or logged (``streaming.redaction``).

Kafka client settings are translated once here (:func:`kafka_client_config`):
Java names become librdkafka's or are refused before anything starts, and
every client (source, producer, admin, bridge, simulator) is built from that.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from fencewatch.state.config import RulesConfig
from fencewatch.state.config import parse_duration_ms as _parse_duration_ms
from fencewatch.state.model import Policy
from fencewatch.state.records import DEFAULT_CLUSTER

from fencewatch.streaming.config import redaction as _redaction
from fencewatch.streaming.config import values as _values
from fencewatch.streaming.config.kafka import KafkaConfigError, to_librdkafka

log = logging.getLogger(__name__)

ENV_PREFIX = "FENCEWATCH_"
REDACTED = _redaction.REDACTED


@dataclass(frozen=True, slots=True)
class StreamingConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    # the `cluster` of what the job decodes itself (consumer-offsets, request-log sources): on its
    # series, verdicts, alerts and reports. Contract events keep their own field (job_cluster)
    cluster: str = DEFAULT_CLUSTER
    heartbeats_topic: str = "fencewatch.heartbeats"
    offsets_topic: str = "fencewatch.offsets"
    source: str = "events"  # events | consumer-offsets | request-log, or a comma list of them
    consumer_offsets_topic: str = "__consumer_offsets"
    request_log_topic: str = "fencewatch.request-log"  # record values are broker request-log lines
    topic_ids_file: str | None = None  # JSON {topic id: name}, on top of cluster metadata
    log_timezone: str | None = None  # request-log time stamps without an offset: this zone (default UTC)
    input_format: str = "json"  # json | avro
    starting_offsets: str = "latest"  # earliest | latest | JSON
    kafka_source: str = "auto"  # auto | spark (Spark's connector) | python (fencewatch-kafka): sources.connector
    max_offsets_per_trigger: int | None = None  # None: adaptive (catch_up_batch_ms, at most max_batch_records)
    catch_up_batch_ms: int = 8_000  # the micro-batch duration the adaptive limit aims at while reading a backlog
    # (long enough that a micro-batch's fixed cost, paid whatever it reads, is a small share of it;
    # docs/decisions.md, "How much a micro-batch reads")
    max_batch_records: int = 500_000  # the adaptive limit's cap: records per micro-batch (memory)
    fail_on_data_loss: bool = True
    trigger_interval: str = "1s"
    max_skew_ms: int = 2_000
    checkpoint_location: str = "./fencewatch-checkpoint"
    spark_master: str = "local[2]"
    # None (auto): two per core the job starts with (spark.state_partitions); frozen in the checkpoint
    shuffle_partitions: int | None = None
    # group keys per cluster in the stream (routing.group_bucket; docs/decisions.md, "Group buckets");
    # 0: one key per group, 0.2.0's layout. Frozen in the checkpoint when its first query starts
    group_buckets: int = 64
    state_store: str = "rocksdb"  # rocksdb | hdfs
    jemalloc: str = "auto"  # auto | off | a path: the allocator preloaded into the JVM (spark.jemalloc_path())
    kafka: Mapping[str, str] = field(default_factory=dict)  # extra client settings (security.protocol, sasl.*, ssl.*)
    # Schema Registry for Avro input and alerts (url, basic.auth.user.info, ...); empty: Avro input with
    # fixed ids, alerts as JSON (sinks.alerts_format auto)
    schema_registry: Mapping[str, str] = field(default_factory=dict)
    spark_conf: Mapping[str, str] = field(default_factory=dict)  # any spark.* setting (driver memory, executors)


@dataclass(frozen=True, slots=True)
class SinksConfig:
    verdicts_topic: str | None = None
    alerts_topic: str = "fencewatch.alerts"
    # auto: Avro through streaming.schema_registry when one is set, JSON otherwise | avro | json
    alerts_format: str = "auto"
    dlq_topic: str = "fencewatch.dlq"
    # compacted topic of each group's per-member snapshot, written when it changes (fencewatch groups);
    # null: not written
    groups_topic: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464
    metrics_top_groups: int = 50
    # a group with a critical finding keeps its own label until the newest event is this far past it
    metrics_critical_hold_ms: int = 3_600_000
    # /readyz on the metrics port: a micro-batch completed within this many trigger intervals ...
    health_ready_triggers: int = 60
    # ... and at most this many input records not read yet (null: not checked)
    health_max_lag_records: int | None = 1_000_000
    # /healthz: time from start-up to a running query before it answers 503
    health_startup_grace_ms: int = 300_000
    grafana_url: str | None = None
    grafana_token: str | None = None
    # --- output topics (sinks.kafka_topics; checked before the first micro-batch, issue 46)
    create_topics: bool = False  # create missing output topics at start (--create-topics)
    topic_partitions: int | None = None  # their partitions; null: the brokers' num.partitions
    topic_replication_factor: int | None = None  # their replicas; null: the brokers' default.replication.factor
    topic_config: Mapping[str, str] = field(default_factory=dict)  # their settings (retention.ms, ...)
    # --- end output topics


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: str = "INFO"
    format: str = "text"  # text | json (one JSON object per line, for log shippers)


@dataclass(frozen=True, slots=True)
class Config:
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    state: RulesConfig = field(default_factory=RulesConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def validate(self) -> list[str]:
        problems = list(self.state.validate())
        s = self.streaming
        for one in source_list(s.source) or ("",):
            _one_of(problems, "streaming.source", one, SOURCES)
        if s.log_timezone:
            try:
                from zoneinfo import ZoneInfo

                ZoneInfo(s.log_timezone)
            except (ValueError, KeyError, OSError):  # ZoneInfoNotFoundError is a KeyError
                problems.append(f"unknown streaming.log_timezone {s.log_timezone!r}; valid: an IANA zone, e.g. UTC")
        if not s.cluster.strip():
            problems.append("streaming.cluster must not be empty (it is a label value); default: default")
        _one_of(problems, "streaming.input_format", s.input_format, ("json", "avro"))
        _one_of(problems, "streaming.kafka_source", s.kafka_source, ("auto", "spark", "python"))
        _one_of(problems, "streaming.state_store", s.state_store, ("rocksdb", "hdfs"))
        if s.jemalloc not in ("auto", "off") and not os.path.isfile(s.jemalloc):
            problems.append(f"streaming.jemalloc {s.jemalloc!r} is not a file; valid: auto, off, or the path of "
                            "libjemalloc.so.2")
        _one_of(problems, "sinks.alerts_format", self.sinks.alerts_format, ALERTS_FORMATS)
        if self.sinks.alerts_format == "avro" and not s.schema_registry.get("url"):
            problems.append(AVRO_WITHOUT_REGISTRY)
        _one_of(problems, "logging.level", self.logging.level.upper(), ("DEBUG", "INFO", "WARNING", "ERROR"))
        _one_of(problems, "logging.format", self.logging.format, ("text", "json"))
        problems += _kafka_problems(s)
        problems += _spark_conf_problems(s.spark_conf)
        try:
            parse_duration_ms(s.trigger_interval, "streaming.trigger_interval")
        except ConfigError as exc:
            problems.append(str(exc))
        if s.catch_up_batch_ms <= 0:
            problems.append(f"streaming.catch_up_batch_ms must be > 0, got {s.catch_up_batch_ms}")
        if s.max_batch_records <= 0:
            problems.append(f"streaming.max_batch_records must be > 0, got {s.max_batch_records}")
        if s.max_skew_ms < 0:
            problems.append(f"streaming.max_skew_ms must be >= 0, got {s.max_skew_ms}")
        if s.group_buckets < 0:
            problems.append(f"streaming.group_buckets must be >= 0 (0: one key per group), got {s.group_buckets}")
        if s.shuffle_partitions is not None and s.shuffle_partitions <= 0:
            problems.append(f"streaming.shuffle_partitions must be > 0, got {s.shuffle_partitions}")
        if s.max_offsets_per_trigger is not None and s.max_offsets_per_trigger <= 0:
            problems.append(f"streaming.max_offsets_per_trigger must be > 0 (or null: adaptive), "
                            f"got {s.max_offsets_per_trigger}")
        problems += [p for p in (
            _values.bootstrap_problem("streaming.bootstrap_servers", s.bootstrap_servers),
            _values.offsets_problem("streaming.starting_offsets", s.starting_offsets),
            _values.port_problem("sinks.metrics_port", self.sinks.metrics_port, zero="any free port"),
        ) if p]
        return problems + _health_problems(self.sinks) + _output_topic_problems(self.sinks)


def _health_problems(k: SinksConfig) -> list[str]:
    problems = []
    if k.health_ready_triggers < 1:
        problems.append(f"sinks.health_ready_triggers must be >= 1, got {k.health_ready_triggers}")
    if k.health_max_lag_records is not None and k.health_max_lag_records < 0:
        problems.append(f"sinks.health_max_lag_records must be >= 0 or null, got {k.health_max_lag_records}")
    if k.health_startup_grace_ms <= 0:
        problems.append(f"sinks.health_startup_grace_ms must be > 0, got {k.health_startup_grace_ms}")
    return problems


def _output_topic_problems(k: SinksConfig) -> list[str]:
    problems = []
    for name in ("topic_partitions", "topic_replication_factor"):
        value = getattr(k, name)
        if value is not None and value < 1:
            problems.append(f"sinks.{name} must be >= 1 or null (the brokers' default), got {value}")
    return problems


SOURCES = ("events", "consumer-offsets", "request-log")
ALERTS_FORMATS = ("auto", "avro", "json")
AVRO_WITHOUT_REGISTRY = (
    "sinks.alerts_format is avro but no Schema Registry is configured, so no consumer could look the "
    "alerts' schema up by its id: set streaming.schema_registry.url (FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL) "
    "to register the alert schema there, or write alerts as JSON (sinks.alerts_format: json, or auto, the "
    "default, which writes Avro whenever a registry is set; --alerts-format)")


def alerts_format(cfg: "Config") -> str:
    """The alerts' encoding the job uses: ``sinks.alerts_format``, with ``auto`` resolved to
    ``avro`` when a Schema Registry is configured and ``json`` otherwise (docs/decisions.md)."""
    fmt = cfg.sinks.alerts_format
    if fmt == "auto":
        return "avro" if cfg.streaming.schema_registry.get("url") else "json"
    return fmt


def job_cluster(s: StreamingConfig) -> str | None:
    """The cluster the job names the events it decodes itself with (the bridges' ``cluster``
    argument): None for ``default``, the field then omitted as a contract event without one.
    Precedence (docs/contract.md §1): an event's own ``cluster`` field (a bridge's or simulator's
    ``--cluster``) > ``streaming.cluster`` for the consumer-offsets and request-log sources >
    ``default``; the job's setting never relabels a contract event, since one events topic may
    carry several clusters' events."""
    return None if s.cluster == DEFAULT_CLUSTER else s.cluster


def source_list(text: str) -> tuple[str, ...]:
    """``streaming.source`` as its parts: ``request-log,consumer-offsets`` -> both."""
    return tuple(dict.fromkeys(p.strip() for p in str(text).split(",") if p.strip()))


def _one_of(problems: list, name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        problems.append(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


class ConfigError(ValueError):
    pass


def parse_duration_ms(value: Any, name: str = "duration", *, bare: str = "s") -> int:
    """``state.config.parse_duration_ms`` (the one duration parser), failing with a ConfigError."""
    try:
        return _parse_duration_ms(value, name, bare=bare)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def duration_s_arg(text: str) -> float:
    """An argparse ``type`` for a duration flag, in seconds (``90``, ``1m``, ``500ms``): the one parser."""
    import argparse

    try:
        return _parse_duration_ms(text, "duration") / 1000
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port_arg(text: str) -> int:
    """An argparse ``type`` for a port flag: 0 (any free port) or 1-65535, refused at parse time."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = None
    if port is None or _values.port_problem("port", port, zero="any free port"):
        raise argparse.ArgumentTypeError(f"expected a port, 0 (any free port) or 1-65535; got {text!r}")
    return port


def positive_int_arg(text: str) -> int:
    """An argparse ``type`` for a count that must be > 0."""
    import argparse

    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {number}")
    return number


def _coerce(section: str, f: dataclasses.Field, value: Any) -> Any:
    name = f"{section}.{f.name}"
    target = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if f.name in ("broker_policy", "streams_broker_policy"):
        try:
            return Policy(value) if not isinstance(value, Policy) else value
        except ValueError:
            valid = ", ".join(p.value for p in Policy)
            raise ConfigError(f"{name}: unknown policy {value!r}; valid: {valid}") from None
    if f.name.endswith("_ms"):
        if value is None and "None" in target:
            return None
        return parse_duration_ms(value, name, bare="ms")
    if target.startswith("Mapping"):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"{name}: expected a JSON object: {exc}") from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name}: expected a mapping, got {type(value).__name__}")
        return {str(k): str(v) for k, v in value.items()}
    if target.startswith("bool"):
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true/false, got {value!r}")
    if target.startswith("float"):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected a number, got {value!r}") from None
    if target.startswith("int"):
        if value is None or (isinstance(value, str) and value.lower() in ("", "none", "null", "auto")):
            if "None" in target:
                return None
            raise ConfigError(f"{name}: a value is required")
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    if value is None:
        if "None" in target:
            return None
        raise ConfigError(f"{name}: a value is required")
    if isinstance(value, (Mapping, list, tuple)):
        raise ConfigError(f"{name}: expected a string, got a {type(value).__name__}")
    return str(value)


def _section_update(section_name: str, section: Any, values: Mapping[str, Any], *, strict: bool) -> Any:
    by_name = {f.name: f for f in fields(section)}
    changes = {}
    for key, value in values.items():
        k = key.replace("-", "_")
        f = by_name.get(k)
        if f is None:
            msg = f"unknown setting {section_name}.{key}; valid: {', '.join(sorted(by_name))}"
            if strict:
                raise ConfigError(msg)
            log.warning("ignoring %s", msg)
            continue
        value = _coerce(section_name, f, value)
        if isinstance(value, Mapping):  # a later layer adds to a mapping, key by key
            value = {**getattr(section, k), **value}
        changes[k] = value
    return replace(section, **changes) if changes else section


def apply_mapping(cfg: Config, data: Mapping[str, Any], *, strict: bool) -> Config:
    sections = {f.name: f for f in fields(cfg)}
    changes = {}
    for name, values in data.items():
        if name not in sections:
            msg = f"unknown section {name!r}; valid: {', '.join(sorted(sections))}"
            if strict:
                raise ConfigError(msg)
            log.warning("ignoring %s", msg)
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"section {name!r} must be a mapping")
        changes[name] = _section_update(name, getattr(cfg, name), values, strict=strict)
    return replace(cfg, **changes) if changes else cfg


def load_file(path: str | Path) -> Mapping[str, Any]:
    """The file's sections; a :class:`ConfigError` naming the file, line and column if it does not parse."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (byte {exc.start} is not UTF-8)") from None
    if str(path).endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    else:
        data = _load_yaml(path, text)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _load_yaml(path: str | Path, text: str) -> Any:
    import yaml  # pyyaml: the config file and provisioning files are YAML

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark, opened = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        what = str(getattr(exc, "problem", None) or type(exc).__name__)
        context = getattr(exc, "context", None)
        if context and opened is not None:
            what += f" ({context} begun at line {opened.line + 1}, column {opened.column + 1})"
        raise ConfigError(f"{where}: not valid YAML: {what}") from None


def env_mapping(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``FENCEWATCH_SINKS__KAFKA__X`` style names -> {section: {key: value}}.

    A mapping's sub-key written in upper case is lowered (``..._KAFKA__SASL_PASSWORD`` ->
    ``sasl.password``); one with a lower-case letter keeps its case, since Spark's keys are
    case-sensitive (``..._SPARK_CONF__spark_sql_adaptive_coalescePartitions_enabled``). Either
    way ``_`` becomes ``.``; a key with ``_`` or capitals of its own can always be set as JSON,
    ``FENCEWATCH_STREAMING__SPARK_CONF='{"spark.executorEnv.MY_VAR": "1"}'``."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        raw = name[len(ENV_PREFIX):].split("__")
        parts = [p.lower() for p in raw]
        section, key = parts[0], parts[1]
        if len(parts) > 2:  # a mapping setting, e.g. FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD
            suffix = ".".join(raw[2:])
            sub = (suffix if suffix != suffix.upper() else suffix.lower()).replace("_", ".")
            out.setdefault(section, {}).setdefault(key, {})[sub] = value
        else:
            out.setdefault(section, {})[key] = value
    return out


def load_config(*, file: str | Path | None = None, environ: Mapping[str, str] | None = None,
                overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Config:
    """Defaults < file (strict) < environment (lenient) < flags (strict)."""
    cfg = Config()
    if file is not None:
        cfg = apply_mapping(cfg, load_file(file), strict=True)
    env = env_mapping(os.environ if environ is None else environ)
    if env:
        cfg = apply_mapping(cfg, env, strict=False)
    if overrides:
        cfg = apply_mapping(cfg, {k: v for k, v in overrides.items() if v}, strict=True)
    register_secrets(cfg)  # before validation: an error message must not show them either
    problems = cfg.validate()
    if problems:
        raise ConfigError("invalid configuration: " + problems[0] if len(problems) == 1
                          else "invalid configuration:\n  " + "\n  ".join(problems))
    return cfg


def redacted(cfg: Config) -> dict[str, Any]:
    """The config as plain data with every secret replaced by ``[redacted]``."""
    out: dict[str, Any] = {}
    for sec in fields(cfg):
        section = getattr(cfg, sec.name)
        values = {}
        for f in fields(section):
            v = getattr(section, f.name)
            if isinstance(v, Mapping):
                v = _redaction.redact_mapping(dict(sorted(v.items())))
            elif _redaction.is_secret_key(f.name) and v is not None:
                v = REDACTED
            elif isinstance(v, Policy):
                v = v.value
            values[f.name] = v
        out[sec.name] = values
    return out


def digest(cfg: Config) -> str:
    """A short fingerprint of the effective config for the startup line (secrets excluded)."""
    return hashlib.sha256(json.dumps(redacted(cfg), sort_keys=True).encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- secrets

def register_secrets(cfg: Config) -> None:
    """Teach the process' redactor this config's secret values (raw and as translated)."""
    flat: dict[str, Any] = {}
    for sec in fields(cfg):
        section = getattr(cfg, sec.name)
        for f in fields(section):
            v = getattr(section, f.name)
            if isinstance(v, Mapping):
                flat.update({f"{f.name}.{k}": val for k, val in v.items()})
            else:
                flat[f.name] = v
    _redaction.REDACTOR.add_config(flat)
    try:
        _redaction.REDACTOR.add_config(to_librdkafka(cfg.streaming.kafka)[0])  # the password inside a JAAS line
    except KafkaConfigError:
        pass  # reported by validate()


# --------------------------------------------------------------------------- Kafka clients

KAFKA_ROLES = ("source", "producer", "admin", "consumer")
_warned_ignored: set[str] = set()


def _translated_kafka(s: StreamingConfig) -> dict[str, str]:
    """``streaming.kafka`` in librdkafka's names; :class:`ConfigError` for what cannot work."""
    if any(k.strip().lower() == "bootstrap.servers" for k in s.kafka):
        raise ConfigError("streaming.kafka: set the brokers with streaming.bootstrap_servers "
                          "(--bootstrap-servers), not bootstrap.servers")
    try:
        client, ignored = to_librdkafka(s.kafka)
    except KafkaConfigError as exc:
        raise ConfigError(f"streaming.kafka (file, FENCEWATCH_STREAMING__KAFKA__*, -X): {exc}") from None
    # The store types are read by the translation itself; the rest has no librdkafka meaning.
    for key in sorted(set(ignored) - _warned_ignored - {"ssl.truststore.type", "ssl.keystore.type"}):
        _warned_ignored.add(key)
        log.warning("streaming.kafka: %s is a Java client setting with no effect on librdkafka; ignored", key)
    return client


def _kafka_problems(s: StreamingConfig) -> list[str]:
    """What the translation refuses, then what librdkafka would refuse when the first client is built."""
    try:
        client = _translated_kafka(s)
    except ConfigError as exc:
        return [str(exc)]
    problem = _values.librdkafka_problem(client) if client else None
    return [f"streaming.kafka (file, FENCEWATCH_STREAMING__KAFKA__*, -X): librdkafka refuses it: {problem}"] \
        if problem else []


def kafka_client_config(cfg: Config, role: str) -> dict[str, Any]:
    """The settings of one Kafka client, all built from the one translated ``streaming.kafka``.

    ``source``: the Spark source's ``kafka.*`` options (librdkafka names; the JVM
    connector path turns them into Java's, ``sources.kafka_config.to_java``).
    ``producer``, ``admin``, ``consumer``: a confluent-kafka config whose librdkafka
    log lines go through logging (``fencewatch.kafka.<role>``) instead of raw stderr.
    """
    if role not in KAFKA_ROLES:
        raise ValueError(f"unknown Kafka client role {role!r}; valid: {', '.join(KAFKA_ROLES)}")
    client = {"bootstrap.servers": cfg.streaming.bootstrap_servers, **_translated_kafka(cfg.streaming)}
    if role == "source":
        return {f"kafka.{k}": v for k, v in client.items()}
    return {**client, "logger": logging.getLogger(f"fencewatch.kafka.{role}")}


# --------------------------------------------------------------------------- Spark

# spark.* keys that have a fencewatch setting of their own: one name per setting.
_SPARK_OWNED = {
    "spark.master": "streaming.spark_master (--spark-master)",
    "spark.sql.shuffle.partitions": "streaming.shuffle_partitions",
    "spark.sql.streaming.checkpointlocation": "streaming.checkpoint_location (--checkpoint)",
}


def principal(cfg: Config) -> str:
    """``User:<name>`` as the brokers will see the job (SASL user name), or a placeholder."""
    client = kafka_client_config(cfg, "admin")
    user = client.get("sasl.username")
    if user:
        return f"User:{user}"
    if "ssl" in str(client.get("security.protocol", "")).lower():
        return "User:<the certificate's principal>"
    return "User:ANONYMOUS"


def _spark_conf_problems(conf: Mapping[str, str]) -> list[str]:
    problems = []
    for key in conf:
        if not key.startswith("spark."):
            problems.append(f"streaming.spark_conf: {key!r} is not a Spark setting (they start with 'spark.')")
        elif key.lower() in _SPARK_OWNED:
            problems.append(f"streaming.spark_conf: set {key} with {_SPARK_OWNED[key.lower()]}")
    return problems


def parse_timezone(name: str | None):
    """``--log-timezone``: an IANA zone name (or UTC); None when not given."""
    if not name:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} ({exc})") from None
