"""The one redactor: which settings are secrets, and how their values leave every output.

What lives here: :func:`is_secret_key` (the single list of secret setting names,
used by ``--print-config``, the Kafka source's reprs and the log formatter) and
:class:`Redactor`, which removes secret values from any text. Logs need the
second: py4j at DEBUG prints each Spark option as protocol lines
(``skafka.sasl.password\\nshunter2``), where no ``key=value`` shape survives, so
the values themselves are known and struck wherever they appear.

Imports: standard library only (``sources/kafka_config`` uses it on executors).
"""
from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"

# Secret setting names, matched anywhere in the lowercased key: Kafka's and
# librdkafka's (sasl.password, sasl.jaas.config, ssl.key.password,
# ssl.keystore.password, sasl.oauthbearer.client.secret, sasl.oauthbearer.config),
# Schema Registry's (basic.auth.user.info, bearer.auth.token), Grafana's token, and
# inline PEM keys (ssl.key.pem, ssl.keystore.key).
_SECRET_KEY = re.compile(
    r"password|passwd|secret|jaas|token|credential|user\.info|userinfo|api\.key|private\.key|"
    r"ssl\.key\.pem|keystore\.key|oauthbearer\.config|(^|[._])key\.pem$"
)

# Shorter values are not struck from free text: a 1-3 character "secret" would
# garble every log line and protects nothing (docs/decisions.md).
MIN_SECRET_LEN = 4

# Shapes a secret takes in text even when its value was never registered:
# ``sasl.password=x``, ``"sasl.password": "x"``, ``password="x"`` (JAAS), URL user info.
_KEY_VALUE = re.compile(
    r"""(?P<key>[\w.\-]*(?:password|passwd|secret|token|credential|user\.info|api\.key)[\w.\-]*)"""
    r"""(?P<sep>['"]?\s*[:=]\s*)(?P<q>['"])?(?P<value>(?(q)(?:\\.|(?!(?P=q))[^\\])*|[^\s,;}'")\]]+))""",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)(?P<user>[^\s/@:]+):(?P<pw>[^\s/@]+)@", re.I)


def is_secret_key(key: str) -> bool:
    """True for a setting whose value must never be shown (any client, any section)."""
    return bool(_SECRET_KEY.search(str(key).lower()))


def redact_mapping(config: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``config`` safe to show: secret values replaced by ``[redacted]``."""
    return {k: (REDACTED if is_secret_key(k) and v is not None else v) for k, v in config.items()}


def _variants(value: str) -> set[str]:
    """How one value appears in text: as is, JSON-escaped, JAAS-quoted, py4j-escaped."""
    out = {value, json.dumps(value)[1:-1], value.replace("\\", "\\\\").replace('"', '\\"'),
           value.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")}
    return {v for v in out if len(v) >= MIN_SECRET_LEN}


class Redactor:
    """Strikes known secret values and secret-shaped ``key=value`` pairs from text.

    Values are registered as configurations load (:meth:`add_config`); a value
    is never removed, so a secret seen once stays hidden for the process' life.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Iterable[object]) -> None:
        with self._lock:
            before = len(self._values)
            for v in values:
                if v is not None:
                    self._values |= _variants(str(v))
            if len(self._values) != before:
                # Longest first: a secret containing another is struck whole.
                alts = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(map(re.escape, alts)))

    def add_config(self, mapping: Mapping[str, object]) -> None:
        """Register the secret values of a flat settings mapping (and of JAAS lines in it)."""
        found: list[object] = []
        for k, v in mapping.items():
            if v is None or not is_secret_key(k):
                continue
            found.append(v)
            for m in _KEY_VALUE.finditer(str(v)):  # password="..." inside a JAAS line
                found.append(m.group("value"))
        self.add(found)

    def __call__(self, text: str) -> str:
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        text = _KEY_VALUE.sub(_strike_value, text)
        return _URL_USERINFO.sub(r"\g<scheme>\g<user>:" + REDACTED + "@", text)


def _strike_value(m: re.Match[str]) -> str:
    if not m.group("value") or m.group("value") == REDACTED:
        return m.group(0)
    return f"{m.group('key')}{m.group('sep')}{m.group('q') or ''}{REDACTED}"


#: The process' redactor: configurations register into it, the log formatter applies it.
REDACTOR = Redactor()
