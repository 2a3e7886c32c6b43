"""``FENCEWATCH_*`` variables that set nothing: a typo in a section or key name, which the
lenient environment layer ignores (it only logs a warning), or a variable of another part of
the project taken for a setting.

What lives here: :func:`env_problems`, each unknown variable with the nearest valid name. The
valid names come from the Config's own fields (``FENCEWATCH_<SECTION>__<KEY>``, and
``FENCEWATCH_<SECTION>__<MAPPING>__<SUB_KEY>`` for the mapping settings), so a new setting is
known here the day it is added. ``fencewatch doctor`` reports them.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Mapping

from fencewatch.streaming.config.settings import ENV_PREFIX, Config

#: ``FENCEWATCH_*`` variables read by something other than the Config: not settings, not typos.
OTHER_VARIABLES: Mapping[str, str] = {
    "FENCEWATCH_WORKER_TRIM": "the Spark Python workers' memory trim",
    "FENCEWATCH_JARS_DIR": "where `make jars` put Apache Kafka's jars (demo and test brokers)",
    "FENCEWATCH_TANSU_BIN": "the demo's Tansu broker", "FENCEWATCH_TANSU_LOG": "the demo's Tansu broker",
    "FENCEWATCH_TEST_BROKER": "the test suite", "FENCEWATCH_TEST_BOOTSTRAP": "the test suite",
    "FENCEWATCH_BENCH_BROKER": "the benchmarks", "FENCEWATCH_KAFKA_LAUNCHER": "the test suite",
    **{name: "the rsyslog shipper's configuration (deploy/request-log/)" for name in (
        "FENCEWATCH_BROKER_ID", "FENCEWATCH_REQUEST_LOG", "FENCEWATCH_BOOTSTRAP_SERVERS",
        "FENCEWATCH_REQUEST_LOG_TOPIC", "FENCEWATCH_RSYSLOG_WORKDIR")},
}
#: Names read before the settings existed, still honoured for one release.
DEPRECATED: Mapping[str, str] = {"FENCEWATCH_GRAFANA_URL": "FENCEWATCH_SINKS__GRAFANA_URL",
                                 "FENCEWATCH_GRAFANA_TOKEN": "FENCEWATCH_SINKS__GRAFANA_TOKEN"}


@dataclass(frozen=True, slots=True)
class EnvProblem:
    """``name`` sets nothing (``fatal``: it looks meant as a setting) or is read elsewhere."""

    name: str
    problem: str
    nearest: str | None
    fatal: bool


def setting_names(cfg: Config | None = None) -> tuple[list[str], list[str]]:
    """(every plain setting's variable, every mapping setting's variable prefix)."""
    cfg = cfg or Config()
    plain, mappings = [], []
    for sec in fields(cfg):
        for f in fields(getattr(cfg, sec.name)):
            name = f"{ENV_PREFIX}{sec.name}__{f.name}".upper()
            is_mapping = isinstance(getattr(getattr(cfg, sec.name), f.name), Mapping)
            (mappings if is_mapping else plain).append(name)
    return plain, mappings


def env_problems(environ: Mapping[str, str]) -> list[EnvProblem]:
    """Each ``FENCEWATCH_*`` variable of ``environ`` that no setting reads, in name order."""
    plain, mappings = setting_names()
    out = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        problem = _problem(name, plain, mappings)
        if problem is not None:
            out.append(problem)
    return out


def _problem(name: str, plain: list[str], mappings: list[str]) -> EnvProblem | None:
    upper = name.upper()
    if "__" not in name[len(ENV_PREFIX):]:
        if name in DEPRECATED:
            return EnvProblem(name, "is deprecated", DEPRECATED[name], fatal=False)
        nearest = _nearest(upper, plain, mappings)
        if name in OTHER_VARIABLES:  # not a setting; worth a word only when it looks like one
            if nearest is None:
                return None
            return EnvProblem(name, f"is read by {OTHER_VARIABLES[name]}, not by fencewatch's configuration",
                              nearest, fatal=False)
        return EnvProblem(name, "is not a setting (settings are FENCEWATCH_<SECTION>__<KEY>, two underscores)",
                          nearest, fatal=True)
    if upper in plain or any(upper.startswith(m + "__") and len(upper) > len(m) + 2 for m in mappings):
        return None
    if upper in mappings:
        return None  # a whole mapping as JSON
    section = upper[len(ENV_PREFIX):].split("__")[0]
    sections = {m[len(ENV_PREFIX):].split("__")[0] for m in plain + mappings}
    what = "no section" if section not in sections else "no setting"
    return EnvProblem(name, f"sets nothing ({what} by that name)", _nearest(upper, plain, mappings), fatal=True)


def _nearest(upper: str, plain: list[str], mappings: list[str]) -> str | None:
    """The closest valid name; a mapping's sub-key written with one underscore too few
    (``..._KAFKA_SASL_PASSWORD``) keeps its sub-key (``..._KAFKA__SASL_PASSWORD``)."""
    for prefix in mappings:
        for head in (prefix, prefix.replace("__", "_")):
            if upper.startswith(head + "_") and not upper.startswith(prefix + "__"):
                rest = upper[len(head) + 1:].lstrip("_")
                if rest:
                    return f"{prefix}__{rest}"
    # Compared without the common prefix, which would make any two names look alike.
    candidates = {c[len(ENV_PREFIX):]: c for c in plain + [m + "__<KEY>" for m in mappings]}
    found = difflib.get_close_matches(upper[len(ENV_PREFIX):], list(candidates), n=1, cutoff=0.75)
    return candidates[found[0]] if found else None
