"""``fencewatch doctor``'s Kafka checks: connection and authentication, the ACLs of
``runtime.access.job_needs``, the brokers' release and KIP-848, ``broker_policy``, and the
request-log topic (how fresh, how well its newest lines decode, whether their topic ids
resolve). Each check adds lines to a :class:`~fencewatch.streaming.commands.doctor.Report`
with what to do on failure. Nothing here writes to the cluster: ACLs are read from the
authorized operations Kafka computes for the asking principal (KIP-430), versions from
ApiVersions, the request log by an assign-only consumer.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from typing import TYPE_CHECKING

from fencewatch.state.fencing import KIP1251_SINCE
from fencewatch.state.model import Policy
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.ingest.request_log import DECODED_APIS
from fencewatch.streaming.runtime.access import ALL, Need, job_needs
from fencewatch.streaming.sources.api_versions import (CONSUMER_GROUP_HEARTBEAT, ApiVersionsError, api_versions,
                                                       kafka_release, release_at_least)
from fencewatch.streaming.sources.cluster_probe import ClusterProbe, ClusterView

if TYPE_CHECKING:
    from fencewatch.streaming.commands.doctor import Report

#: librdkafka's "sasl_ssl://host:9092/bootstrap: " (or "/1: ") before an error's text.
_BROKER_PREFIX = re.compile(r"^\S+/(bootstrap|\d+): ")
#: Kafka's operation names as kafka-acls.sh spells them.
_ACL_WORDS = {"READ": "Read", "WRITE": "Write", "DESCRIBE": "Describe", "DESCRIBE_CONFIGS": "DescribeConfigs"}


def acl_command(cfg: cfgmod.Config, need: Need, operations: list[str]) -> str:
    """The kafka-acls.sh line that grants ``operations`` on ``need``'s resource."""
    ops = " ".join(f"--operation {_ACL_WORDS.get(op, op)}" for op in operations)
    name = f"'{need.name}'" if need.name == ALL else need.name
    where = {"topic": f"--topic {name}", "group": f"--group {name}", "cluster": "--cluster"}[need.resource]
    if need.prefixed:
        where += " --resource-pattern-type prefixed"
    return (f"kafka-acls.sh --bootstrap-server {cfg.streaming.bootstrap_servers} --command-config admin.properties "
            f"--add --allow-principal {cfgmod.principal(cfg)} {ops} {where}")


# --------------------------------------------------------------------------- connection

def check_connection(report: Report, cfg: cfgmod.Config, probe: ClusterProbe) -> ClusterView | None:
    client = probe.client
    how = str(client.get("security.protocol", "plaintext")).upper()
    if "SASL" in how:
        how += f", {client.get('sasl.mechanisms', client.get('sasl.mechanism', 'GSSAPI'))}"
    who = f"{cfg.streaming.bootstrap_servers} as {cfgmod.principal(cfg)} ({how})"
    began = time.monotonic()
    view = probe.connect()
    if view is not None:
        report.add("OK", "connection", f"{who}: cluster {view.cluster_id}, {len(view.brokers)} broker(s), "
                   f"{len(view.topics)} topic(s) visible ({time.monotonic() - began:.1f} s)")
        return view
    text, fix = explain_connection(probe.errors, client, list(probe.log_lines))
    report.add("FAIL", "connection", f"{who}: {text}", fix)
    return None


def explain_connection(errors: list[tuple[str, str]], client: dict, log_lines: list[str] = ()) -> tuple[str, str]:
    """librdkafka's errors (and log lines) -> what went wrong and what to change."""
    names = {name for name, _ in errors}
    said = next((t for n, t in errors if n not in ("_ALL_BROKERS_DOWN",)), None)
    if said is None:  # only "all brokers down": the reason is in the log
        said = next((line for line in log_lines if "Disconnected" in line or "failed" in line),
                    errors[0][1] if errors else "no answer")
    said = _BROKER_PREFIX.sub("", said.split("]: ", 1)[-1] if said.startswith("FAIL [") else said)
    if "_AUTHENTICATION" in names and "mechanism" in said.lower() and "supported mechanisms" in said.lower():
        offered = said.rsplit("supported mechanisms:", 1)[-1].split("(")[0].strip()
        return (f"the brokers do not offer this SASL mechanism (they offer {offered}; {said})",
                f"set sasl.mechanism to one of {offered} (-X sasl.mechanism=..., "
                "FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM)")
    if "_AUTHENTICATION" in names:
        return (f"authentication failed: wrong user name or password ({said})",
                "check sasl.username and sasl.password (FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD, -X, --config) "
                "and that the user exists with this mechanism's credentials")
    if "_RESOLVE" in names:
        return (f"the address does not resolve ({said})", "check streaming.bootstrap_servers (--bootstrap-servers)")
    if "ssl" in said.lower() and "handshake" in said.lower():
        return (f"TLS handshake failed ({said})",
                "check security.protocol for this listener, and ssl.ca.location for the brokers' CA")
    if "Connection refused" in said or "timed out" in said.lower() or "_TRANSPORT" in names and "Connect" in said:
        return (f"the brokers are unreachable ({said})",
                "check streaming.bootstrap_servers, that the brokers run, and the network path (firewall, port)")
    if "Disconnected" in said:
        return (f"the broker closed the connection ({said})",
                f"the listener probably expects another security.protocol than {client.get('security.protocol', 'PLAINTEXT')} "
                "(SASL_SSL, SASL_PLAINTEXT, SSL)")
    return said, "check streaming.bootstrap_servers and the streaming.kafka security settings"


# --------------------------------------------------------------------------- ACLs

def check_access(report: Report, cfg: cfgmod.Config, probe: ClusterProbe) -> dict[str, bool]:
    """One line per need of the job's principal; returns topic -> whether its needs are met."""
    needs = job_needs(cfg)
    named = [n.name for n in needs if n.resource == "topic" and n.name != ALL]
    access = probe.access(list(dict.fromkeys(named)))
    ok: dict[str, bool] = {}
    for need in needs:
        if need.resource == "topic" and need.name == ALL:
            continue  # checked on what the lines name (check_topic_ids)
        if need.resource == "topic":
            ok[need.name] = _topic_line(report, cfg, need, access.topics.get(need.name, "UNKNOWN"))
        elif need.resource == "cluster":
            _cluster_line(report, cfg, need, access.cluster)
        elif need.name == ALL:
            _group_line(report, cfg, need, probe)
        else:
            _group_need_line(report, cfg, need, probe)
    return ok


def _topic_line(report: Report, cfg: cfgmod.Config, need: Need, found) -> bool:
    check = f"acl topic {need.name}"
    if found == "UNKNOWN_TOPIC_OR_PART":
        report.add("FAIL", check, f"the topic does not exist ({need.why})",
                   f"create it: kafka-topics.sh --bootstrap-server {cfg.streaming.bootstrap_servers} --create "
                   f"--topic {need.name} --partitions N (docs/real-cluster.md, docs/deploy.md)")
        return False
    if isinstance(found, str):
        if found == "TOPIC_AUTHORIZATION_FAILED":
            report.add("FAIL", check, f"{cfgmod.principal(cfg)} may not even Describe it ({need.why})",
                       acl_command(cfg, need, list(need.operations)))
        else:
            report.add("FAIL", check, f"describing it failed: {found}", "see the brokers' logs")
        return False
    missing = [op for op in need.operations if op not in found]
    words = "+".join(_ACL_WORDS.get(op, op) for op in need.operations)
    if missing:
        report.add("FAIL", check, f"{cfgmod.principal(cfg)} may not {'/'.join(_ACL_WORDS[m] for m in missing)} it "
                   f"({need.why}); allowed: {', '.join(sorted(found)) or 'nothing'}",
                   acl_command(cfg, need, missing))
        return False
    report.add("OK", check, f"{words} ({need.why})")
    return True


def _cluster_line(report: Report, cfg: cfgmod.Config, need: Need, ops) -> None:
    missing = list(need.operations) if ops is None else [op for op in need.operations if op not in ops]
    if missing:
        report.add("WARN", "acl cluster", f"{cfgmod.principal(cfg)} may not {'/'.join(_ACL_WORDS[m] for m in missing)} the "
                   f"cluster: the job runs without it, but the doctor cannot read "
                   "group.coordinator.rebalance.protocols (is KIP-848 on?)", acl_command(cfg, need, missing))
    else:
        report.add("OK", "acl cluster", f"Describe+DescribeConfigs ({need.why})")


def group_probe_name(need: Need) -> str:
    """A group id the need's ACL covers: the name, or one under the prefix (as the source's are)."""
    return f"{need.name}-doctor" if need.prefixed else need.name


def _group_need_line(report: Report, cfg: cfgmod.Config, need: Need, probe: ClusterProbe) -> None:
    check = f"acl group {need.name}" + ("*" if need.prefixed else "")
    if probe.may_describe_group(group_probe_name(need)):
        report.add("OK", check, f"Describe ({need.why})")
    else:
        report.add("FAIL", check, f"{cfgmod.principal(cfg)} may not Describe it ({need.why}): librdkafka looks the "
                   "group's coordinator up and fails the read with GROUP_AUTHORIZATION_FAILED",
                   acl_command(cfg, need, ["DESCRIBE"]))


def _group_line(report: Report, cfg: cfgmod.Config, need: Need, probe: ClusterProbe) -> None:
    if probe.may_describe_group():
        report.add("OK", "acl groups", f"Describe ({need.why})")
    else:
        report.add("WARN", "acl groups", f"{cfgmod.principal(cfg)} may not Describe groups: the job runs without it, but "
                   "how many groups use KIP-848 cannot be counted", acl_command(cfg, need, ["DESCRIBE"]))


# --------------------------------------------------------------------------- versions

def check_brokers(report: Report, cfg: cfgmod.Config, probe: ClusterProbe, view: ClusterView) -> dict:
    """ApiVersions of every broker (no ACL needed): the release each runs, KIP-848's API and features."""
    answers, problems, tls = {}, [], []
    for broker_id, address in sorted(view.brokers.items()):
        try:
            answers[broker_id] = api_versions(address, probe.client, timeout_s=probe.timeout_s)
        except ApiVersionsError as exc:
            (tls if exc.tls else problems).append(f"broker {broker_id} at {address}: {exc}")
    releases = {b: kafka_release(info) or "unknown" for b, info in answers.items()}
    by_release: dict[str, list[int]] = {}
    for b, r in releases.items():
        by_release.setdefault(r, []).append(b)
    text = "; ".join(f"Apache Kafka {r} on broker(s) {', '.join(map(str, bs))}" for r, bs in sorted(by_release.items()))
    if problems:
        report.add("FAIL", "brokers", (text + "; " if text else "") + "not reachable at the advertised address: "
                   + "; ".join(problems), "the brokers' advertised.listeners must be reachable from where the job "
                   "runs (each partition is read from its leader)")
    elif tls:
        report.add("WARN", "brokers", (text + "; " if text else "") + "not asked for ApiVersions over TLS: "
                   + "; ".join(tls), "the doctor's own connection reads PEM files only (ssl.ca.location, "
                   "ssl.certificate.location, ssl.key.location); the release and KIP-848 are then not checked")
    elif len(by_release) > 1:
        report.add("WARN", "brokers", f"{text}: the brokers run different releases (an upgrade under way?)",
                   "judge with the policy of the release most coordinators will run, and check again after the upgrade")
    else:
        mv = next(iter(answers.values())).finalized_features.get("metadata.version") if answers else None
        report.add("OK", "brokers", text + (f" (finalized metadata.version {mv})" if mv is not None else ""))
    return {"answers": answers, "releases": releases}


def check_kip848(report: Report, probe: ClusterProbe, brokers: dict) -> None:
    answers = brokers["answers"]
    if not answers:
        report.add("SKIP", "kip-848", "no broker answered ApiVersions")
        return
    served = all(info.max_version(CONSUMER_GROUP_HEARTBEAT) is not None for info in answers.values())
    levels = {info.finalized_features.get("group.version") for info in answers.values()}
    protocols = probe.broker_config(min(answers), ("group.coordinator.rebalance.protocols",))
    protocols = protocols if isinstance(protocols, str) else protocols["group.coordinator.rebalance.protocols"]
    groups = probe.groups_by_type() if probe.may_describe_group() else None
    seen = (f"; groups: {groups.get('CONSUMER', 0)} consumer (KIP-848), {groups.get('CLASSIC', 0)} classic"
            if groups is not None else "")
    if not served:
        report.add("WARN", "kip-848", "off: a broker does not serve ConsumerGroupHeartbeat; fencewatch judges only "
                   "classic groups' commits, expiry and truncation", "KIP-848 is GA from Kafka 4.0")
    elif levels == {0}:
        report.add("WARN", "kip-848", "off: the cluster's group.version feature is 0",
                   "kafka-features.sh --bootstrap-server B upgrade --feature group.version=1")
    elif protocols == "CLUSTER_AUTHORIZATION_FAILED":
        report.add("OK", "kip-848", "ConsumerGroupHeartbeat served, group.version "
                   f"{','.join(str(v) for v in sorted(x for x in levels if x is not None)) or 'n/a'}; "
                   f"group.coordinator.rebalance.protocols not readable (no DescribeConfigs){seen}")
    elif isinstance(protocols, str) and "consumer" not in protocols.split(","):
        report.add("WARN", "kip-848", f"off: group.coordinator.rebalance.protocols={protocols}{seen}",
                   "add consumer to group.coordinator.rebalance.protocols on every broker to use KIP-848 groups")
    else:
        report.add("OK", "kip-848", f"on: group.coordinator.rebalance.protocols={protocols}, group.version "
                   f"{','.join(str(v) for v in sorted(x for x in levels if x is not None)) or 'n/a'}{seen}")


def check_policy(report: Report, cfg: cfgmod.Config, brokers: dict) -> None:
    """strict on 4.2 and older, kip1251 from 4.3 (KIP-1251 shipped for consumer groups in 4.3); for
    streams groups kip1251 from 4.2 (``fencing.KIP1251_SINCE``), a row only when configured otherwise."""
    releases = set(brokers["releases"].values()) - {"unknown"}
    have = cfg.state.broker_policy
    if not releases:
        report.add("WARN", "broker_policy", f"{have.value}: the brokers' release is unknown, so it cannot be checked",
                   "set state.broker_policy to strict for Kafka up to 4.2, kip1251 from 4.3")
        return
    wanted = {_release_policy(r, "consumer") for r in releases}
    if len(wanted) > 1:
        report.add("WARN", "broker_policy", f"{have.value}: the brokers run releases with different checks "
                   f"({', '.join(sorted(releases))})", "set it to the policy of the release the upgrade ends on")
    elif have not in wanted:
        (want,) = wanted
        report.add("WARN", "broker_policy", f"{have.value}, but the brokers run {', '.join(sorted(releases))}, which "
                   f"judge{'s' if len(releases) == 1 else ''} commits with {want.value}: verdicts' model_agrees and "
                   "MODEL_DIVERGENCE alerts compare against the wrong check",
                   f"--broker-policy {want.value} (state.broker_policy, FENCEWATCH_STATE__BROKER_POLICY={want.value})")
    else:
        report.add("OK", "broker_policy", f"{have.value}, as the brokers ({', '.join(sorted(releases))}) judge")
    streams = {_release_policy(r, "streams") for r in releases}
    have = cfg.state.streams_broker_policy
    if len(streams) == 1 and have not in streams:  # a row only when it is wrong: streams groups are rarer
        (want,) = streams
        report.add("WARN", "streams_broker_policy", f"{have.value}, but the brokers run {', '.join(sorted(releases))}, "
                   f"which judge streams groups' commits with {want.value}",
                   f"--streams-broker-policy {want.value} (state.streams_broker_policy, "
                   f"FENCEWATCH_STATE__STREAMS_BROKER_POLICY={want.value})")


def _release_policy(release: str, group_type: str) -> Policy:
    """``fencing.release_policy`` for a release as the brokers name it (``newer than 4.4`` too)."""
    since = ".".join(map(str, KIP1251_SINCE[group_type]))
    return Policy.KIP1251 if release_at_least(release, since) else Policy.STRICT


# --------------------------------------------------------------------------- request log

def check_request_log(report: Report, cfg: cfgmod.Config, probe: ClusterProbe, *, lines: int,
                      max_age_s: float, now_ms: int):
    """The newest record per partition against now, then the newest lines through the decoder."""
    topic = cfg.streaming.request_log_topic
    source_group = next(n for n in job_needs(cfg) if n.resource == "group" and n.required)
    tail = probe.tail(topic, lines, group_probe_name(source_group))  # read as the job's source reads
    if tail.error is not None and not tail.records:
        report.add("FAIL", "request-log age", f"{topic}: cannot read it ({tail.error})",
                   "see the acl lines above")
        return None
    ages = {p: (now_ms - ts) / 1000 for p, (_, _, ts) in tail.ends.items() if ts is not None}
    empty = sorted(p for p, (low, high, _) in tail.ends.items() if high <= low)
    stale = sorted(p for p, age in ages.items() if age > max_age_s)
    shown = ", ".join(f"{p}: {_age(a)}" for p, a in sorted(ages.items())[:12])
    fix = ("the shipper (rsyslog) beside each broker must run, and kafka.request.logger must be at DEBUG on every "
           "broker (docs/real-cluster.md §3-4)")
    if not ages or len(stale) == len(ages):
        what = "empty" if not ages else f"its newest record is {_age(min(ages.values()))} old"
        report.add("FAIL", "request-log age", f"{topic}: {what} (partitions {shown or 'all empty'})", fix)
    elif stale or empty:
        report.add("WARN", "request-log age", f"{topic}: partitions {stale + empty} have nothing newer than "
                   f"{_age(max_age_s)} (newest per partition: {shown})", fix + ": one partition per broker")
    else:
        report.add("OK", "request-log age", f"{topic}: newest record per partition {shown}")
    return tail


def check_lines(report: Report, cfg: cfgmod.Config, tail, topic_ids: dict[str, str]):
    """What share of the newest lines the job's decoder reads, and why the others fail."""
    from fencewatch.streaming.commands.bridge import parse_timezone
    from fencewatch.streaming.ingest.line_sample import judge_lines

    records = tail.records
    sample = judge_lines([value or b"" for _, _, _, value in records],
                         [f"{cfg.streaming.request_log_topic}/{p}/{o}" for p, o, _, _ in records],
                         [ts for _, _, ts, _ in records], topic_ids=topic_ids,
                         tz=parse_timezone(cfg.streaming.log_timezone))
    if not sample.lines:
        return sample
    text = (f"{sample.readable} of the newest {sample.lines} lines decode ({100 * sample.share:.1f}%): "
            f"{sample.judged} commits/heartbeats, {sample.other_apis} of other APIs")
    bad = sum(sample.broken.values()) + sample.not_request_log
    if bad:
        reasons = Counter(sample.broken)
        if sample.not_request_log:
            reasons["NOT_A_REQUEST_LOG_LINE"] = sample.not_request_log
        text += f"; unreadable: {', '.join(f'{k} {n}' for k, n in reasons.most_common())}"
        if sample.example is not None:
            text += f" (e.g. {sample.example[0]}: {sample.example[1]} {sample.example[2][:120]})"
    fix = ("the shipper must send each line unchanged, one record per line, in Kafka's layout "
           "'[%d] %p %m (%c)%n' (no JSON envelope, lines not cut: docs/real-cluster.md §3)")
    if sample.share < 0.9:
        report.add("FAIL", "request-log lines", text, fix)
    elif bad:
        report.add("WARN", "request-log lines", text, fix)
    elif sample.other_apis > sample.lines / 2:
        report.add("WARN", "request-log lines", text, f"keep only APIs {', '.join(map(str, DECODED_APIS))} with the "
                   "log4j2 filter (deploy/request-log/log4j2-request-filter.yaml)")
    else:
        report.add("OK", "request-log lines", text)
    return sample


def check_topic_ids(report: Report, cfg: cfgmod.Config, view: ClusterView, sample) -> None:
    """Topic ids in the lines must resolve to names (Describe on the monitored topics)."""
    need = next((n for n in job_needs(cfg) if n.resource == "topic" and n.name == ALL), None)
    if need is None:
        report.add("OK", "topic ids", f"from {cfg.streaming.topic_ids_file}" if cfg.streaming.topic_ids_file
                   else "not needed by --source events")
        return
    visible = len(view.topics)
    if sample is not None and sample.unresolved_topic_ids:
        report.add("FAIL", "topic ids", f"{sample.unresolved_topic_ids} topic id(s) in the newest request-log lines "
                   f"have no name: {cfgmod.principal(cfg)} may not Describe those topics ({visible} visible); their verdicts "
                   "would name topics by id", acl_command(cfg, need, ["DESCRIBE"]) + " (or streaming.topic_ids_file)")
    elif sample is not None:
        report.add("OK", "topic ids", f"every topic id in the newest lines resolves ({visible} topics visible)")
    elif view.topics <= own_topics(cfg) | {"__consumer_offsets", "__transaction_state"}:
        report.add("WARN", "topic ids", f"{cfgmod.principal(cfg)} sees only fencewatch's own topics: the topics of the "
                   "groups in __consumer_offsets would be named by id", acl_command(cfg, need, ["DESCRIBE"]))
    else:
        report.add("OK", "topic ids", f"{visible} topics visible to {cfgmod.principal(cfg)} (names for the ids in "
                   "__consumer_offsets records)")


def own_topics(cfg: cfgmod.Config) -> frozenset[str]:
    return frozenset(n.name for n in job_needs(cfg) if n.resource == "topic" and n.name != ALL)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
