"""Every fencewatch metric, defined once, and the exporter's settings.

What lives here: pure definitions -- name, type, help, label names and the
closed set of values of every enum label -- used by the exporters (the job's,
`sinks/prometheus.py`, and the bridge's, `sinks/bridge_metrics.py`), the
dashboard generator, `docs/metrics.md` and the tests that check dashboards and
alert rules only use metrics defined here (`MetricsConfig`, re-exported, is
`sinks/metrics_config.py`'s). No
prometheus_client import: the dashboard generator needs the names only.

A group gauge names the field of a group's status it shows (`MetricSpec.status_field`) and the
exporter shows it from that alone: declared once, here, it reaches `/metrics` with no other line
(issue 47 item 4); families the exporter names in code go by their specs' constants (`EVENTS_TOTAL`).

Label rules (contract §8): `cluster`, `group` and closed enums only, never member
ids, offsets or partitions. `group` is bounded by :class:`GroupLimiter`: the
`max_groups` most active groups keep their own series, every other group is
folded into `group="other"` of its cluster. A value outside an enum's closed
set is exported as `other` (or `unknown` for event types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from fencewatch.sinks.group_limiter import OTHER, GroupKey, GroupLimiter  # noqa: F401  (imported from here)
from fencewatch.sinks.metrics_config import MetricsConfig  # noqa: F401  (imported from here)
from fencewatch.state.model import AlertKind, CommitClass, Policy, Severity
from fencewatch.state.records import EventType

PREFIX = "fencewatch_"

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"

# ----------------------------------------------------------------- closed enums

EVENT_TYPES = (*(t.value for t in EventType), "unknown")
"""contract §1 event types; any other `type` is counted as `unknown` (and skipped by the rules)."""

SOURCES = ("heartbeats", "offsets", "request_log", "consumer_offsets", "file", OTHER)
"""Role of the input an event came from: the two input topics (whatever their
configured names), the brokers' request log, ``__consumer_offsets``, a replayed file, or
anything else."""

COMMIT_KINDS = ("commit", "txn_commit")
POLICIES = tuple(p.value for p in Policy)
RESULTS = ("NONE", "STALE_MEMBER_EPOCH", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "GROUP_ID_NOT_FOUND", OTHER)
"""A policy's answer to one (commit, partition): Kafka's error name, NONE = accepted."""

CLASSES = tuple(c.value for c in CommitClass)
APIS = ("OffsetCommit", "TxnOffsetCommit", "ConsumerGroupHeartbeat", OTHER)
BROKER_ERRORS = (
    "STALE_MEMBER_EPOCH",
    "ILLEGAL_GENERATION",
    "FENCED_MEMBER_EPOCH",
    "UNKNOWN_MEMBER_ID",
    "FENCED_INSTANCE_ID",
    "GROUP_ID_NOT_FOUND",
    "REBALANCE_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "NOT_COORDINATOR",
    "REQUEST_TIMED_OUT",
    OTHER,
)
"""Errors the broker answered (heartbeats' `error_code`, commits' `error_code`)."""

FENCING_ERRORS = ("STALE_MEMBER_EPOCH", "ILLEGAL_GENERATION")
"""The two errors FENCING_SPIKE counts."""

ERROR_CODES = {
    7: "REQUEST_TIMED_OUT",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    22: "ILLEGAL_GENERATION",
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
    69: "GROUP_ID_NOT_FOUND",
    82: "FENCED_INSTANCE_ID",
    110: "FENCED_MEMBER_EPOCH",
    113: "STALE_MEMBER_EPOCH",
}
"""Kafka error codes of BROKER_ERRORS, for callers that hand in codes."""

COMPARISON_OUTCOMES = ("agree", "diverge")
ALERT_KINDS = tuple(k.value for k in AlertKind) + (OTHER,)
SEVERITIES = tuple(s.value for s in Severity) + (OTHER,)
LIFECYCLE_KINDS = ("FENCING_SPIKE", "TXN_ABORT_STORM")
"""Alert kinds with a firing/resolved lifecycle (`details["status"]`)."""
PINNING_SEVERITY = Severity.CRITICAL.value
"""Alerts of this severity pin their group's own label for `MetricsConfig.critical_hold_s`: the
state decides what is critical (state/alerts.py, state/partition.py: UNSAFE_ACCEPT,
DUPLICATE_ASSIGNMENT, LOG_TRUNCATION, OFFSETS_EXPIRED of a group without members)."""
PINNING_KINDS = ("ZOMBIE_COMMIT",)
"""Kinds that pin whatever their severity: a zombie commit is a warning to page on, but the
group it names must not read "other" (issue 46, item 7)."""

TRUNCATION_REASONS = ("LOG_TRUNCATION", "OFFSET_OUT_OF_RANGE")
PROTOCOLS = ("consumer", "streams", "classic", "simple", OTHER)
"""A group's type as the model keeps it: `simple` for a group that only commits offsets
(no membership; Kafka's "simple" consumer groups, assign() and admin commits)."""
GROUP_STATES = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Assigning",
    "Reconciling",
    OTHER,
)
DLQ_REASONS = (
    "INVALID_JSON",
    "INVALID_AVRO",
    "UNKNOWN_SCHEMA_ID",
    "NOT_AN_OBJECT",
    "MISSING_FIELD",
    "WRONG_TYPE",
    "INVALID_VALUE",
    "RECORD_TOO_LARGE",
    "FIELD_TOO_LONG",
    "TOO_MANY_ENTRIES",
    OTHER,
)
"""Dead-letter reason codes (`streaming.decoding.DecodeError.code`, the part of `reason` before any parameters)."""

DISPOSITIONS = ("labelled", OTHER)

BRIDGE_INPUTS = ("consumer_offsets", "request_log")
"""What `fencewatch bridge` reads: `__consumer_offsets` records, or broker request-log lines."""

UNDECODABLE_REASONS = (
    "MISSING_KEY",
    "MALFORMED_KEY",
    "MALFORMED_VALUE",
    "MALFORMED",
    "MALFORMED_PROTOCOL",
    "BAD_ENCODING",
    "BAD_JSON",
    "BAD_FIELD",
    "BAD_TIMESTAMP",
    "BAD_TOPIC_ID",
    "MISSING_FIELD",
    "MISSING_TIMESTAMP",
    "INTERNAL",
    OTHER,
)
"""Why the bridge could not use a record: `__consumer_offsets` records' `RecordDecodeError` codes
(records Kafka itself skips -- unknown types and versions -- are not counted), request-log lines'
`broken.*` codes."""

ROUTING_APIS = ("OffsetCommit", "TxnOffsetCommit", "ConsumerGroupHeartbeat", "StreamsGroupHeartbeat", "JoinGroup",
                "SyncGroup", "LeaveGroup")
ROUTING_ERRORS = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
"""Answers that say "not me": the request never reached the group (contract §10.1 a)."""

# ------------------------------------------------------------------ definitions


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family. `name` is the exposed family name (counters end in `_total`)."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    buckets: tuple[float, ...] = ()
    # set on a deprecated alias: the family it repeats, value for value (removed one release later)
    alias_of: str | None = None
    # the process that serves it: the streaming job's driver ("job") or `fencewatch bridge` ("bridge")
    exporter: str = "job"
    # a family read off each group's status: the key of `state.status.status`'s dict, all the
    # exporter needs to show it (sinks/README.md, "A group gauge"): a gauge shows the number, or 1
    # when the field is one of its labels (a state); one without `group` counts groups by value;
    # a counter counts a monotone total's growth
    status_field: str | None = None
    status_unit: int = 1  # the field counts this many of the metric's unit (1000: ms of a _seconds gauge)
    fold: str | None = None  # what group="other" shows of the folded groups: "sum", "min", or nothing

    def series_names(self) -> tuple[str, ...]:
        """Names a PromQL query may use for this family."""
        if self.type == HISTOGRAM:
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.name,)


_G = ("cluster", "group")

# A family the exporter names in code is bound to a constant in its spec (`EVENTS_TOTAL := ...`):
# the exporter names it by that, never by a string of its own.
METRICS: tuple[MetricSpec, ...] = (
    # -- input
    MetricSpec(
        EVENTS_TOTAL := PREFIX + "events_total",
        COUNTER,
        "Input events read, by contract §1 event type and input role (partition-scoped events have group=\"\").",
        _G + ("type", "source"),
        {"type": EVENT_TYPES, "source": SOURCES},
    ),
    MetricSpec(
        DLQ_RECORDS_TOTAL := PREFIX + "dlq_records_total",
        COUNTER,
        "Undecodable input records sent to the dead-letter topic, by reason code.",
        ("reason",),
        {"reason": DLQ_REASONS},
    ),
    # -- commit judgement
    MetricSpec(
        COMMITS_JUDGED_TOTAL := PREFIX + "commits_judged_total",
        COUNTER,
        "(commit, partition) verdicts, once per policy: the policy's answer (NONE = accepted) and the "
        "verdict class; filter on one policy to count each verdict once.",
        _G + ("kind", "policy", "result", "class"),
        {"kind": COMMIT_KINDS, "policy": POLICIES, "result": RESULTS, "class": CLASSES},
    ),
    MetricSpec(
        BROKER_ERRORS_TOTAL := PREFIX + "broker_errors_total",
        COUNTER,
        "Errors the broker answered to commit requests (once per request) and heartbeats, by API and error name.",
        _G + ("api", "error"),
        {"api": APIS, "error": BROKER_ERRORS},
    ),
    MetricSpec(
        ABORTED_TRANSACTIONS_TOTAL := PREFIX + "aborted_transactions_total",
        COUNTER,
        "Rejected transactional offset commits (each one aborts its transaction), per request.",
        _G,
    ),
    MetricSpec(
        AVOIDABLE_ABORTS_TOTAL := PREFIX + "avoidable_aborts_total",
        COUNTER,
        "Aborted transactions that kip1251 would have accepted for every partition (an upgrade saves them).",
        _G,
    ),
    MetricSpec(
        ZOMBIE_COMMITS_TOTAL := PREFIX + "zombie_commits_total",
        COUNTER,
        "(commit, partition) verdicts of class zombie: kip1251 rejects and another member holds the partition.",
        _G + ("kind",),
        {"kind": COMMIT_KINDS},
    ),
    MetricSpec(
        UNSAFE_ACCEPTS_TOTAL := PREFIX + "unsafe_accepts_total",
        COUNTER,
        "(commit, partition) verdicts flagged unsafe: a policy accepts while another member holds the "
        "partition at an assignment epoch <= the commit's epoch.",
        _G + ("kind",),
        {"kind": COMMIT_KINDS},
    ),
    MetricSpec(
        MODEL_COMPARISONS_TOTAL := PREFIX + "model_comparisons_total",
        COUNTER,
        "(commit, partition) verdicts whose event carried the broker's answer: whether the model's policy "
        "predicted it (diverge = MODEL_DIVERGENCE).",
        _G + ("kind", "outcome"),
        {"kind": COMMIT_KINDS, "outcome": COMPARISON_OUTCOMES},
    ),
    MetricSpec(
        TRUNCATIONS_TOTAL := PREFIX + "truncations_total",
        COUNTER,
        "Committed offsets beyond the log: LOG_TRUNCATION (diverged leader epoch, KIP-320) or "
        "OFFSET_OUT_OF_RANGE (below the log start offset).",
        _G + ("reason",),
        {"reason": TRUNCATION_REASONS},
    ),
    MetricSpec(
        ALERTS_TOTAL := PREFIX + "alerts_total",
        COUNTER,
        "Alerts raised (resolved notices of lifecycle alerts are not counted), by kind and severity.",
        _G + ("kind", "severity"),
        {"kind": ALERT_KINDS, "severity": SEVERITIES},
    ),
    MetricSpec(
        ALERTS_FIRING := PREFIX + "alerts_firing",
        GAUGE,
        "Lifecycle alerts currently firing (1) or resolved (0); for group=\"other\" the number of groups firing.",
        _G + ("kind",),
        {"kind": LIFECYCLE_KINDS},
    ),
    # -- group model
    MetricSpec(
        GROUP_MEMBERS := PREFIX + "group_members",
        GAUGE,
        "Members the model holds in the group.",
        _G + ("protocol",),
        {"protocol": PROTOCOLS},
        status_field="members", fold="sum",
    ),
    MetricSpec(
        GROUP_PARTITIONS_HELD := PREFIX + "group_partitions_held",
        GAUGE,
        "Partitions held by the group's members (assigned or pending revocation).",
        _G,
        status_field="partitions_held", fold="sum",
    ),
    MetricSpec(
        GROUP_EPOCH := PREFIX + "group_epoch",
        GAUGE,
        "The group's epoch as last seen (not exported for group=\"other\").",
        _G,
        status_field="group_epoch",
    ),
    MetricSpec(
        GROUP_MAX_MEMBER_EPOCH := PREFIX + "group_max_member_epoch",
        GAUGE,
        "Highest member epoch in the group (not exported for group=\"other\").",
        _G,
        status_field="max_member_epoch",
    ),
    MetricSpec(
        GROUP_STATE := PREFIX + "group_state",
        GAUGE,
        "The group's state (1 for the current state; not exported for group=\"other\").",
        _G + ("state",),
        {"state": GROUP_STATES},
        status_field="state",
    ),
    MetricSpec(
        GROUP_REBALANCES_TOTAL := PREFIX + "group_rebalances_total",
        COUNTER,
        "Rebalances (group epoch bumps or classic generations) the model has seen.",
        _G,
        status_field="rebalances_total",
    ),
    MetricSpec(
        GROUP_OFFSETS_EXPIRY_DEADLINE_TIMESTAMP_SECONDS := PREFIX + "group_offsets_expiry_deadline_timestamp_seconds",
        GAUGE,
        "Unix time at which the group's earliest committed offset expires (absent: nothing expires); "
        "group=\"other\" holds the earliest deadline of the folded groups.",
        _G,
        status_field="expiry_deadline_ms", status_unit=1000, fold="min",
    ),
    # Deprecated names, exported one more release beside the new ones (docs/metrics.md).
    MetricSpec(
        PREFIX + "group_offsets_expiry_deadline_seconds",
        GAUGE,
        "DEPRECATED: use fencewatch_group_offsets_expiry_deadline_timestamp_seconds (same values; "
        "a Unix time is named _timestamp_seconds). Removed in the next release.",
        _G,
        alias_of=GROUP_OFFSETS_EXPIRY_DEADLINE_TIMESTAMP_SECONDS,
    ),
    MetricSpec(
        GROUPS := PREFIX + "groups",
        GAUGE,
        "Groups the model knows, by state (all groups, not limited by max_groups).",
        ("cluster", "state"),
        {"state": GROUP_STATES},
        status_field="state",
    ),
    MetricSpec(
        EXPORTER_GROUPS := PREFIX + "exporter_groups",
        GAUGE,
        "Groups with their own series (labelled) and groups folded into group=\"other\".",
        ("cluster", "disposition"),
        {"disposition": DISPOSITIONS},
    ),
    # -- monitor health
    MetricSpec(
        BATCHES_TOTAL := PREFIX + "batches_total",
        COUNTER,
        "Micro-batches the monitor has completed.",
    ),
    MetricSpec(
        BATCH_DURATION_SECONDS := PREFIX + "batch_duration_seconds",
        HISTOGRAM,
        "Wall time to process one micro-batch.",
        buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
    ),
    MetricSpec(
        DECISION_LATENCY_SECONDS := PREFIX + "decision_latency_seconds",
        HISTOGRAM,
        "Wall time from an event's coordinator timestamp to the verdict or alert it caused.",
        buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0),
    ),
    MetricSpec(
        INPUT_LAG_RECORDS := PREFIX + "input_lag_records",
        GAUGE,
        "Records in the input topics not yet read by the monitor.",
    ),
    MetricSpec(
        STATE_ROWS := PREFIX + "state_rows",
        GAUGE,
        "Rows in the query's state stores (groups and topic keys), from Spark's last progress report.",
    ),
    MetricSpec(
        STATE_MEMORY_BYTES := PREFIX + "state_memory_bytes",
        GAUGE,
        "Memory the query's state stores report using (RocksDB: memtables, block cache, index and filter "
        "blocks; native memory the JVM's own figures do not show), from Spark's last progress report.",
    ),
    MetricSpec(
        LAST_EVENT_TIMESTAMP_SECONDS := PREFIX + "last_event_timestamp_seconds",
        GAUGE,
        "Coordinator timestamp of the newest event processed.",
    ),
    MetricSpec(
        LAST_BATCH_TIMESTAMP_SECONDS := PREFIX + "last_batch_timestamp_seconds",
        GAUGE,
        "Unix time the last micro-batch completed.",
    ),
    MetricSpec(
        EXPORTER_REJECTED_RECORDS_TOTAL := PREFIX + "exporter_rejected_records_total",
        COUNTER,
        "Records the exporter could not count (malformed verdict/alert/status/count records), by record type.",
        ("record",),
        {"record": ("verdict", "alert", "status", "count")},
    ),
    MetricSpec(
        UP := PREFIX + "up",
        GAUGE,
        "1 while the monitor reports healthy and completed a micro-batch within its staleness bound.",
    ),
    MetricSpec(
        BUILD_INFO := PREFIX + "build_info",
        GAUGE,
        "Constant 1, labelled with the running versions.",
        ("version", "python_version", "pyspark_version"),
    ),
    # -- fencewatch bridge (its own endpoint, default 127.0.0.1:9465)
    MetricSpec(
        PREFIX + "bridge_records_total",
        COUNTER,
        "Records the bridge read from its source topic (__consumer_offsets records or request-log lines).",
        ("cluster", "input"),
        {"input": BRIDGE_INPUTS},
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_events_total",
        COUNTER,
        "Events the bridge produced to the input topics, by contract §1 event type.",
        ("cluster", "type"),
        {"type": EVENT_TYPES},
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_undecodable_records_total",
        COUNTER,
        "Records of the source topic the bridge could not decode (reported in its log and skipped), by reason code.",
        ("cluster", "reason"),
        {"reason": UNDECODABLE_REASONS},
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_coordinator_routing_answers_total",
        COUNTER,
        "Requests the broker answered with a coordinator-routing error (a commit: once per such answer code): they "
        "never reached the group and give no event (contract §10.1 a).",
        ("cluster", "api", "error"),
        {"api": ROUTING_APIS, "error": ROUTING_ERRORS},
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_delivery_failures_total",
        COUNTER,
        "Events the producer could not deliver to the input topics (the bridge then exits 1).",
        ("cluster",),
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_source_lag_records",
        GAUGE,
        "Records in the bridge's source topic not read yet, as of the consumer's last fetch.",
        ("cluster",),
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_last_produce_timestamp_seconds",
        GAUGE,
        "Unix time the bridge last produced an event.",
        ("cluster",),
        exporter="bridge",
    ),
    MetricSpec(
        PREFIX + "bridge_up",
        GAUGE,
        "1 while the bridge's loop runs (its /healthz answers 200).",
        ("cluster",),
        exporter="bridge",
    ),
)

BY_NAME: Mapping[str, MetricSpec] = {m.name: m for m in METRICS}

JOB_METRICS: tuple[MetricSpec, ...] = tuple(m for m in METRICS if m.exporter == "job")
"""The families the streaming job's driver serves."""

STATUS_METRICS: tuple[MetricSpec, ...] = tuple(m for m in JOB_METRICS if m.status_field)
"""The job's families read off each group's status (`MetricSpec.status_field`), in their order: the
exporter parses a status into these fields and shows them from these specs alone, so a new group
gauge is one spec here (and its field in `state.status.status`)."""

BRIDGE_METRICS: tuple[MetricSpec, ...] = (*(m for m in METRICS if m.exporter == "bridge"),
                                          BY_NAME[BUILD_INFO])
"""The families `fencewatch bridge` serves (its own, and the running versions)."""

ALIASES: Mapping[str, tuple[str, ...]] = {
    m.name: tuple(a.name for a in METRICS if a.alias_of == m.name) for m in METRICS if not m.alias_of
}
"""Family name -> its deprecated aliases (the exporter writes every value under each)."""


def spec(name: str) -> MetricSpec:
    """The spec of `name` (with or without the prefix); KeyError names the valid ones."""
    full = name if name.startswith(PREFIX) else PREFIX + name
    try:
        return BY_NAME[full]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; valid: {', '.join(sorted(BY_NAME))}") from None


def series_names() -> dict[str, MetricSpec]:
    """Every series name a query may use (histograms: _bucket/_sum/_count) -> its spec."""
    return {s: m for m in METRICS for s in m.series_names()}


def closed(value: object, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`, else the enum's overflow value (its last)."""
    return value if value in allowed else allowed[-1]  # type: ignore[return-value]


def error_name(value: object) -> str | None:
    """A broker error as a BROKER_ERRORS label; None for no error (None, 0, "NONE")."""
    if value is None or value == 0 or value == "NONE":
        return None
    if isinstance(value, int):
        return ERROR_CODES.get(value, OTHER)
    return closed(value, BROKER_ERRORS)


def markdown_table(exporter: str = "job") -> str:
    """A metrics table of docs/metrics.md (the job's or the bridge's), generated so the doc cannot drift."""
    rows = ["| name | type | labels | help |", "|---|---|---|---|"]
    bar = "\\|"  # a literal | inside a table cell
    for m in METRICS:
        if m.alias_of or m.exporter != exporter:
            continue  # aliases are listed under "Deprecated names"
        labels = []
        for label in m.labels:
            values = m.enums.get(label)
            labels.append(f"`{label}` ({bar.join(values)})" if values else f"`{label}`")
        help_text = m.help.replace("|", bar)
        rows.append(f"| `{m.name}` | {m.type} | {', '.join(labels) or '-'} | {help_text} |")
    return "\n".join(rows) + "\n"
