"""Every shipped request-log filter keeps exactly the APIs the decoder reads.

The list is written in four places a broker reads (the log4j2 RequestAppender entry, the log4j 1
properties, the two files of the Strimzi logging ConfigMap) and in the docs; the decoder's own
list is ``request_log.DECODED_APIS`` (the keys it has a decoder for). A filter that drops an API
the decoder reads loses those lines silently in a real deployment (StreamsGroupHeartbeat, 88,
was dropped so), one that keeps an unneeded API ships every Fetch. Each filter is read here for
what it accepts, message by message for every API key 0-199 (Python's ``re`` reads these
patterns as Java's does); ``test_log4j2_filter.py`` and ``test_strimzi.py`` run the same files
in real log4j-core.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fencewatch.streaming.ingest.request_log import DECODED_APIS
from test_log4j2_filter import LOG4J1_SNIPPET, SNIPPET, message

ROOT = Path(__file__).resolve().parents[2]
STRIMZI_LOGGING = ROOT / "deploy" / "kubernetes" / "strimzi" / "kafka-logging.yaml"
KEYS = range(200)  # Kafka's API keys are below 100 today; 100-199 is room for a wrong alternation


def _log4j2_regex() -> str:
    appender = yaml.safe_load(SNIPPET.read_text())["Configuration"]["Appenders"]["RollingFile"][0]
    assert appender["RegexFilter"]["onMatch"] == "ACCEPT" and appender["RegexFilter"]["onMismatch"] == "DENY"
    return appender["RegexFilter"]["regex"]


def _properties(text: str) -> dict[str, str]:
    """A Java properties text's entries (one per line here), ``\\\\`` unescaped as Java reads it."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, value = re.split(r"\s*[=:]\s*", line, maxsplit=1)
            out[key] = value.replace("\\\\", "\\")
    return out


def _strimzi_regexes() -> dict[str, str]:
    data = yaml.safe_load(STRIMZI_LOGGING.read_text())["data"]
    out = {}
    for name, text in data.items():
        props = _properties(text)
        assert props["appender.request.filter.apis.type"] == "RegexFilter", name
        assert (props["appender.request.filter.apis.onMatch"], props["appender.request.filter.apis.onMismatch"]) \
            == ("ACCEPT", "DENY"), name
        out[name] = props["appender.request.filter.apis.regex"]
    return out


def _regex_keeps(regex: str) -> set[int]:
    """The API keys whose message log4j2's RegexFilter accepts (it matches the whole message)."""
    pattern = re.compile(regex)
    return {k for k in KEYS if pattern.fullmatch(message(k, "X")) and pattern.fullmatch(message(k, "X", True))}


def _log4j1_keeps() -> set[int]:
    """StringMatchFilters accepting on match, then a DenyAllFilter: the keys whose message holds one string."""
    props = _properties(LOG4J1_SNIPPET.read_text())
    entry = re.compile(r"log4j\.appender\.requestAppender\.filter\.(\d+)")
    chain = sorted({int(m.group(1)) for k in props if (m := entry.fullmatch(k))})
    classes = [props[f"log4j.appender.requestAppender.filter.{n}"] for n in chain]
    assert classes[-1] == "org.apache.log4j.varia.DenyAllFilter" and chain == list(range(1, len(chain) + 1))
    assert set(classes[:-1]) == {"org.apache.log4j.varia.StringMatchFilter"}
    assert all(props[f"log4j.appender.requestAppender.filter.{n}.AcceptOnMatch"] == "true" for n in chain[:-1])
    strings = [props[f"log4j.appender.requestAppender.filter.{n}.StringToMatch"] for n in chain[:-1]]
    return {k for k in KEYS if any(s in message(k, "X") for s in strings)}


def test_the_decoder_reads_streams_heartbeats():
    """The list the filters are held to comes from the decoder's table (a guard on this test's premise)."""
    assert {8, 28, 68, 88, 11, 13, 14} <= set(DECODED_APIS) and list(DECODED_APIS) == sorted(DECODED_APIS)


def test_the_log4j2_filter_keeps_the_decoded_apis():
    assert _regex_keeps(_log4j2_regex()) == set(DECODED_APIS)


def test_the_log4j1_filter_keeps_the_decoded_apis():
    assert _log4j1_keeps() == set(DECODED_APIS)


@pytest.mark.parametrize("name", sorted(_strimzi_regexes()))
def test_the_strimzi_logging_keeps_the_decoded_apis(name):
    assert _regex_keeps(_strimzi_regexes()[name]) == set(DECODED_APIS)


def test_a_regex_missing_an_api_is_caught():
    """Negative control: the reading above sees an alternation without 88 (the filter before this change)."""
    regex = _log4j2_regex()
    without = regex.replace("|88)", ")")
    assert without != regex and _regex_keeps(without) == set(DECODED_APIS) - {88}


DOCS = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_docs_state_the_decoded_apis():
    """Where a doc writes the filter's alternation (``"requestApiKey":(8|...)``) or "the APIs
    fencewatch decodes (8, ...)", it is the decoder's list (docs/archive keeps the history)."""
    found = 0
    for doc in DOCS:
        text = re.sub(r"\s+", " ", doc.read_text(encoding="utf-8"))
        for m in re.finditer(r'"requestApiKey":\(([\d|]+)\)', text):
            assert tuple(map(int, m.group(1).split("|"))) == DECODED_APIS, (doc.name, m.group(0))
            found += 1
        for m in re.finditer(r"APIs fencewatch decodes \(([\d, ]+)\)", text):
            assert tuple(map(int, m.group(1).split(", "))) == DECODED_APIS, (doc.name, m.group(0))
            found += 1
    assert found >= 4  # docs/real-cluster.md, docs/decisions.md, README.md, deploy/README.md
