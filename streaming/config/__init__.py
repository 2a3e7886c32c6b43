"""The one typed configuration of every command (``settings``), its Kafka client translation
(``kafka``), the redactor of secrets (``redaction``) and the log handlers (``logsetup``).

The names of ``settings`` are handed on here: ``from fencewatch.streaming.config import Config``.
"""
from fencewatch.streaming.config.settings import (  # noqa: F401
    ENV_PREFIX,
    REDACTED,
    StreamingConfig,
    SinksConfig,
    LoggingConfig,
    Config,
    SOURCES,
    ALERTS_FORMATS,
    alerts_format,
    source_list,
    ConfigError,
    parse_duration_ms,
    apply_mapping,
    load_file,
    env_mapping,
    load_config,
    redacted,
    digest,
    register_secrets,
    KAFKA_ROLES,
    kafka_client_config,
)
