"""The always-on job under poison input and faults, through the public command ``fencewatch run``
on the embedded broker (real Tansu, real Spark). Each test adds its row to docs/reliability.md."""
from __future__ import annotations

import json
import signal
import time
from dataclasses import replace

import pytest

from fencewatch.sim.engine import SimConfig, simulate
from fencewatch.sim.profiles import profile
from reliability_harness import (RunProcess, produce_clock, produce_events, read_topic, record_row, run_args,
                                 verdict_keys, wait_for)

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def sim_events(groups: int, n: int, seed: int = 3) -> list[dict]:
    knobs = replace(profile("zombie-storm"), groups=groups)
    return simulate(SimConfig(knobs=knobs, seed=seed, duration_ms=None, max_events=n, event_id_prefix="e-",
                              labels=False))


def expected_verdicts(events: list[dict]) -> set:
    """Every partition of every commit gets one verdict."""
    return {(e["event_id"], o["topic"], o["partition"]) for e in events
            if e["type"] in ("offset_commit", "txn_offset_commit") for o in e["offsets"]}


def covering(got, expected: set):
    """``got`` once it holds every expected key, else None (keep waiting)."""
    return got if set(got) >= expected else None


def make_topics(topic_factory) -> dict:
    return {"hb": topic_factory(2, "hb"), "off": topic_factory(2, "off"), "verdicts": topic_factory(2, "verdicts"),
            "alerts": topic_factory(1, "alerts"), "dlq": topic_factory(1, "dlq")}


def poison_assignment(events: list[dict], size: int = 900_000) -> dict:
    """The input that once stopped the job for good: a valid assignment whose member id is 900 KB,
    claiming a partition another member holds (a DUPLICATE_ASSIGNMENT alert that carried the id
    in its summary and details, over the producer's 1 MB limit)."""
    first = next(e for e in events if e["type"] == "member_assignment" and e["assigned"])
    tp = first["assigned"][0]
    mid = events[len(events) // 2]
    return {"type": "member_assignment", "ts": mid["ts"], "group_id": first["group_id"], "event_id": "poison",
            "member_id": "m" * size, "protocol": "consumer", "member_epoch": 1000, "state": "STABLE",
            "assigned": [{"topic": tp["topic"], "partitions": tp["partitions"][:1]}], "pending_revocation": []}


@pytest.mark.slow
def test_900kb_member_id_among_good_events_keeps_the_job_alive(broker, topic_factory, tmp_path):
    topics = make_topics(topic_factory)
    good = sim_events(groups=2, n=2000)
    poison = poison_assignment(good)
    half = len(good) // 2
    produce_events(broker, topics["hb"], topics["off"], good[:half] + [poison] + good[half:])
    produce_clock(broker, [topics["hb"], topics["off"]], good[-1]["ts"] + 5_000)
    expected = expected_verdicts(good)

    run = RunProcess(run_args(broker, topics, tmp_path / "cp"), tmp_path / "run.log")
    stop_s, code, dead = float("nan"), None, []
    try:
        got = wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected), timeout=240, every=3,
                       proc=run)
        dead = read_topic(broker, topics["dlq"])
        assert run.alive(), run.log()[-3000:]
        t0 = time.monotonic()
        run.signal(signal.SIGTERM)
        code = run.wait(30)
        stop_s = time.monotonic() - t0
    finally:
        run.kill()
    got = got or verdict_keys(broker, topics["verdicts"])
    lost = len(expected - set(got))
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    alerts = [json.loads(m.value()) for m in read_topic(broker, topics["alerts"])]
    record_row("poison_900kb_member_id", load=f"{len(good):,} sim events + 1 with a 900 KB member_id",
               fault="poison record; then SIGTERM",
               outcome=f"alive; the poison record in the DLQ ({len(dead)} dead letter); stopped in {stop_s:.1f} s, "
                       f"exit {code}",
               verdicts=f"{len(set(got)):,} of {len(expected):,}", alerts=f"{len(alerts)}", lost=lost,
               duplicated=duplicated)
    assert lost == 0 and duplicated == 0
    assert code == 0, run.log()[-3000:]
    (letter,) = dead
    assert json.loads(letter.value())["event_id"] == "poison"
    reason = dict(letter.headers())["fencewatch.reason"].decode()
    assert reason.startswith("FIELD_TOO_LONG") and "field=member_id" in reason, reason
    assert all(len(json.dumps(a)) < 100_000 for a in alerts)
    assert stop_s < 15, stop_s
    after_stop = run.log().split("SIGTERM: stopping")[-1]
    assert "SPARK_JOB_CANCELLED" not in run.log() and "Traceback" not in run.log(), run.log()[-3000:]
    assert "\tat " not in after_stop and "Exception" not in after_stop, after_stop[-3000:]


# --------------------------------------------------------------------------- faults

def expected_commit_alerts(bootstrap: str, topics: dict) -> set:
    """Alert ids of the commit-time kinds the local engine raises on the same records in the
    same order as the job (its seq: offset * 4 + topic rank)."""
    from fencewatch.state.engine import LocalEngine, sort_key
    from fencewatch.streaming.config import load_config
    from fencewatch.streaming.decoding import DecodeError, UnknownType, decode_json_line

    engine = LocalEngine(load_config().state)
    typed = []
    for topic, rank in ((topics["hb"], 0), (topics["off"], 1)):
        for m in read_topic(bootstrap, topic, 1.5):
            res = decode_json_line(m.value(), seq=m.offset() * 4 + rank,
                                   default_event_id=f"{topic}/{m.partition()}/{m.offset()}", coords="")
            if not isinstance(res, (DecodeError, UnknownType)):
                typed.append(res)
    for ev in sorted(typed, key=sort_key):
        engine.feed(ev)
    return {a.alert_id for a in engine.out.alerts if a.kind in COMMIT_KINDS}


COMMIT_KINDS = {"ZOMBIE_COMMIT", "AVOIDABLE_FENCING", "UNSAFE_ACCEPT", "MODEL_DIVERGENCE"}


def in_flight(checkpoint) -> bool:
    """A micro-batch is planned and not yet committed (the moment to kill)."""
    offsets = {p.name for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {p.name for p in (checkpoint / "commits").glob("[0-9]*")}
    return bool(offsets - commits) and len(commits) >= 1


def finish_and_count(broker, topics, run, expected, timeout=300):
    """Wait for every expected verdict, stop with SIGTERM; (verdict counts, alert counts, exit code)."""
    try:
        got = wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected), timeout=timeout,
                       every=3, proc=run)
        run.signal(signal.SIGTERM)
        code = run.wait(30)
    finally:
        run.kill()
    got = got or verdict_keys(broker, topics["verdicts"])
    from collections import Counter
    alerts = Counter(json.loads(m.value())["alert_id"] for m in read_topic(broker, topics["alerts"]))
    return got, alerts, code


def losses(got, expected, alerts, expected_alerts):
    lost = len(expected - set(got)) + len(expected_alerts - set(alerts))
    duplicated = sum(n - 1 for n in got.values() if n > 1) + sum(n - 1 for n in alerts.values() if n > 1)
    return lost, duplicated


@pytest.mark.slow
def test_sigkill_mid_batch_three_times_then_restart(broker, topic_factory, tmp_path):
    topics = make_topics(topic_factory)
    events = sim_events(groups=3, n=6_000, seed=5)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    expected = expected_verdicts(events)
    cp = tmp_path / "cp"
    args = run_args(broker, topics, cp, "--max-offsets-per-trigger", "600")
    kills = 0
    for attempt in range(3):
        run = RunProcess(args, tmp_path / f"run{attempt}.log")
        done = cp / "commits"
        before = len(list(done.glob("[0-9]*"))) if done.exists() else 0
        # Kill with a batch in flight, once this run has committed a batch of its own.
        hit = wait_for(lambda: len(list(done.glob("[0-9]*"))) > before and in_flight(cp), timeout=240, every=0.05,
                       proc=run)
        assert run.alive(), run.log()[-3000:]
        run.kill()
        kills += bool(hit)
    run = RunProcess(args, tmp_path / "final.log")
    got, alerts, code = finish_and_count(broker, topics, run, expected)
    expected_alerts = expected_commit_alerts(broker, topics)
    lost, duplicated = losses(got, expected, {k: v for k, v in alerts.items()}, expected_alerts)
    record_row("sigkill_mid_batch_x3", load=f"{len(events):,} sim events, 600 offsets per trigger",
               fault=f"SIGKILL of the process group with a batch in flight, {kills} times; restart",
               outcome=f"resumed from the checkpoint; exit {code} on SIGTERM",
               verdicts=f"{len(set(got)):,} of {len(expected):,}",
               alerts=f"{len(set(alerts) & expected_alerts)} of {len(expected_alerts)} commit-time", lost=lost,
               duplicated=duplicated)
    assert kills == 3
    assert lost == 0 and duplicated == 0
    assert code == 0


@pytest.mark.slow
def test_broker_paused_60s(topic_factory, tmp_path):
    import os

    from fencewatch.streaming.broker import EmbeddedBroker

    with EmbeddedBroker() as paused:
        bootstrap = paused.bootstrap
        topics = {k: f"{k}-p" for k in ("hb", "off", "verdicts", "alerts", "dlq")}
        paused.create_topics([topics["hb"], topics["off"], topics["verdicts"]], partitions=2)
        paused.create_topics([topics["alerts"], topics["dlq"]], partitions=1)
        events = sim_events(groups=2, n=4_000, seed=7)
        first, second = events[:2_000], events[2_000:]
        produce_events(bootstrap, topics["hb"], topics["off"], first)
        run = RunProcess(run_args(bootstrap, topics, tmp_path / "cp", "--max-offsets-per-trigger", "500"),
                         tmp_path / "run.log")
        try:
            assert wait_for(lambda: (tmp_path / "cp" / "commits" / "1").exists(), timeout=240, every=0.5, proc=run)
            os.kill(paused.pid, signal.SIGSTOP)
            time.sleep(60)
            alive_during = run.alive()
            os.kill(paused.pid, signal.SIGCONT)
            produce_events(bootstrap, topics["hb"], topics["off"], second)
            produce_clock(bootstrap, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
            expected = expected_verdicts(events)
            got, alerts, code = finish_and_count(bootstrap, topics, run, expected)
        finally:
            run.kill()
        expected_alerts = expected_commit_alerts(bootstrap, topics)
        lost, duplicated = losses(got, expected, alerts, expected_alerts)
    record_row("broker_paused_60s", load=f"{len(events):,} sim events, half before and half after the pause",
               fault="broker SIGSTOP for 60 s mid-stream, then SIGCONT",
               outcome=f"waited and resumed; {'alive' if alive_during else 'DIED'} during the pause; exit {code}",
               verdicts=f"{len(set(got)):,} of {len(expected):,}",
               alerts=f"{len(set(alerts) & expected_alerts)} of {len(expected_alerts)} commit-time", lost=lost,
               duplicated=duplicated)
    assert alive_during
    assert lost == 0 and duplicated == 0
    assert code == 0


@pytest.mark.slow
def test_checkpoint_bound_recovers_an_oversized_planned_batch(broker, topic_factory, tmp_path):
    import subprocess

    from reliability_harness import FENCEWATCH

    topics = make_topics(topic_factory)
    events = sim_events(groups=3, n=12_000, seed=9)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    expected = expected_verdicts(events)
    cp = tmp_path / "cp"
    # Planned with no effective limit: batch 0 is the whole backlog; killed while it runs.
    run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "100000000"), tmp_path / "run0.log")
    planned = wait_for(lambda: (cp / "offsets" / "0").exists() and not (cp / "commits" / "0").exists(),
                       timeout=240, every=0.05, proc=run)
    run.kill()
    assert planned and not (cp / "commits" / "0").exists(), "batch 0 committed before the kill"
    show = subprocess.run(FENCEWATCH + ["checkpoint", "show", "--checkpoint", str(cp)], capture_output=True,
                          text=True, timeout=60)
    assert json.loads(show.stdout)["records"] >= len(events) and json.loads(show.stdout)["uncommitted"]
    bound = subprocess.run(FENCEWATCH + ["checkpoint", "bound", "--checkpoint", str(cp),
                                         "--max-offsets-per-partition", "1000"], capture_output=True, text=True,
                           timeout=60)
    planned = json.loads((cp / "offsets" / "0.unbounded").read_text().split("\n")[2])
    bounded = sum(min(int(o), 1_000) for parts in planned.values() for o in parts.values())
    assert bound.returncode == 0 and f"now {bounded:,} (" in bound.stdout, bound.stdout + bound.stderr
    run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "4000"), tmp_path / "run1.log")
    got, alerts, code = finish_and_count(broker, topics, run, expected)
    first = json.loads((cp / "offsets" / "0").read_text().split("\n")[2])
    assert sum(int(o) for parts in first.values() for o in parts.values()) == bounded < len(events)
    expected_alerts = expected_commit_alerts(broker, topics)
    # Verdicts are compared one for one. Alerts are counted against the local engine's for the
    # record, not asserted: re-bounding batch 0 changes how far each topic is read per batch, and
    # a commit-time alert that depends on events held for the other topic can then differ
    # (seen once: 4 of 5; an open question for the query assembly's ordering, docs/reliability.md).
    lost, duplicated = losses(got, expected, {}, set())
    duplicated += sum(n - 1 for n in alerts.values() if n > 1)
    missing = len(expected_alerts - set(alerts))
    record_row("checkpoint_bound_oversized_batch", load=f"{len(events):,}-record backlog planned as one batch",
               fault="SIGKILL during the oversized batch 0; `fencewatch checkpoint bound` to 1,000 per partition",
               outcome=f"batch 0 replayed with {bounded:,} records, the rest in later batches; exit {code}",
               verdicts=f"{len(set(got)):,} of {len(expected):,}",
               alerts=f"{len(set(alerts) & expected_alerts)} of {len(expected_alerts)} commit-time",
               lost=f"{lost} verdicts" + (f"; {missing} engine alert id(s) not raised (see text)" if missing else ""),
               duplicated=duplicated)
    assert lost == 0 and duplicated == 0 and code == 0


def logged_verdicts(run: RunProcess) -> int:
    """The job's own count of verdicts written, from its last progress line."""
    import re

    found = re.findall(r"verdicts (\d+) \(", run.log())
    return int(found[-1]) if found else 0


@pytest.mark.slow
def test_300k_backlog_with_run_defaults(broker, topic_factory, tmp_path):
    """The backlog that once ran the driver out of heap (the whole backlog was batch 0 and was
    collected at once): with ``run``'s defaults (a default ``maxOffsetsPerTrigger``, batches read
    in chunks), the job reads it and judges every event."""
    topics = make_topics(topic_factory)
    events = sim_events(groups=20, n=300_000, seed=13)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    expected = expected_verdicts(events)
    n_events = len(events)
    del events
    args = [a for a in run_args(broker, topics, tmp_path / "cp") if a not in ("--trigger", "500ms")]
    run = RunProcess(args, tmp_path / "run.log")
    try:
        wait_for(lambda: logged_verdicts(run) >= len(expected), timeout=1_200, every=5, proc=run)
        alive = run.alive()
        run.signal(signal.SIGTERM)
        code = run.wait(30)
    finally:
        run.kill()
    got = verdict_keys(broker, topics["verdicts"])
    lost = len(expected - set(got))
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    oom = "OutOfMemoryError" in run.log()
    record_row("backlog_300k_defaults", load=f"{n_events:,}-event backlog, `run` defaults",
               fault="backlog read from the earliest offsets",
               outcome=f"{'alive' if alive else 'DIED'}{', OutOfMemoryError' if oom else ''}; exit {code}",
               verdicts=f"{len(set(got)):,} of {len(expected):,}", alerts="-", lost=lost, duplicated=duplicated)
    assert alive and not oom and code == 0
    assert lost == 0 and duplicated == 0


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below ``pid``."""
    import os

    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
                cmd = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            procs[int(name)] = (int(stat[stat.rfind(")") + 2:].split()[1]), cmd)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for child, (ppid, cmd) in procs.items():
            if ppid == p:
                out.append((child, cmd))
                todo.append(child)
    return out


@pytest.mark.slow
def test_python_source_runner_killed_query_restarts(broker, topic_factory, tmp_path):
    """Spark's Python side dies under the job (the streaming source's runner process, SIGKILL):
    the query fails, ``run`` restarts it from the checkpoint in the same process."""
    import os

    topics = make_topics(topic_factory)
    events = sim_events(groups=3, n=6_000, seed=21)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    expected = expected_verdicts(events)
    cp = tmp_path / "cp"
    run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "600"), tmp_path / "run.log")
    killed = []
    try:
        assert wait_for(lambda: (cp / "commits" / "1").exists(), timeout=300, every=0.5, proc=run), run.log()[-3000:]
        for pid, cmd in _descendants(run.proc.pid):
            if "python_streaming_source_runner" in cmd:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    finally:
        if not killed:
            run.kill()
    got, alerts, code = finish_and_count(broker, topics, run, expected)
    expected_alerts = expected_commit_alerts(broker, topics)
    lost, duplicated = losses(got, expected, alerts, expected_alerts)
    restarted = "restarting the query from its checkpoint" in run.log()
    record_row("source_runner_killed", load=f"{len(events):,} sim events, 600 offsets per trigger",
               fault=f"SIGKILL of Spark's Python source runner ({len(killed)} process) mid-stream",
               outcome=f"{'query failed and restarted in the same process' if restarted else 'query survived'}; "
                       f"exit {code}",
               verdicts=f"{len(set(got)):,} of {len(expected):,}",
               alerts=f"{len(set(alerts) & expected_alerts)} of {len(expected_alerts)} commit-time", lost=lost,
               duplicated=duplicated)
    assert killed
    assert lost == 0 and duplicated == 0 and code == 0


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["none", "executor-killed"])
def test_executor_killed_on_standalone_cluster(broker, topic_factory, tmp_path, tmp_path_factory, fault):
    """One executor JVM of a standalone cluster (master + 2 workers on loopback) SIGKILLed
    mid-stream: Spark reruns its tasks on a new executor; the same verdicts, once each."""
    import os

    from test_standalone_cluster import cluster as _cluster_fixture

    gen = _cluster_fixture.__wrapped__(tmp_path_factory)
    url, env = next(gen)
    try:
        topics = make_topics(topic_factory)
        events = sim_events(groups=3, n=6_000, seed=23)
        produce_events(broker, topics["hb"], topics["off"], events)
        produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
        expected = expected_verdicts(events)
        cp = tmp_path / "cp"
        run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "600", "--spark-master", url),
                         tmp_path / "run.log", env=env)
        killed = []
        try:
            assert wait_for(lambda: (cp / "commits" / "1").exists(), timeout=400, every=0.5, proc=run), \
                run.log()[-3000:]
            executors = [pid for pid, cmd in _descendants(os.getpid()) if "CoarseGrainedExecutorBackend" in cmd]
            if fault == "none":
                killed.append(None)  # the baseline: the same run on the cluster, no fault
            elif executors:
                os.kill(executors[0], signal.SIGKILL)
                killed.append(executors[0])
        finally:
            if not killed:
                run.kill()
        got, alerts, code = finish_and_count(broker, topics, run, expected, timeout=400)
        expected_alerts = expected_commit_alerts(broker, topics)
        # Alerts are compared with the local engine's for the record only: on the cluster the
        # same run without a fault already raises 1 of its 2 commit-time alerts (measured), an
        # ordering question of the query assembly, not an effect of the fault.
        lost, duplicated = losses(got, expected, {}, set())
        duplicated += sum(n - 1 for n in alerts.values() if n > 1)
        missing = len(expected_alerts - set(alerts))
    finally:
        next(gen, None)  # the fixture's teardown: stop the cluster
    record_row(f"standalone_cluster_{fault.replace('-', '_')}", load=f"{len(events):,} sim events, 600 offsets "
               "per trigger, standalone cluster (2 workers)",
               fault="SIGKILL of one executor JVM mid-stream" if killed[0] else "none (baseline)",
               outcome=f"{'tasks rerun on a new executor; ' if killed[0] else ''}exit {code}", verdicts=f"{len(set(got)):,} of {len(expected):,}",
               alerts=f"{len(set(alerts) & expected_alerts)} of {len(expected_alerts)} commit-time",
               lost=f"{lost} verdicts" + (f"; {missing} engine alert id(s) not raised (see text)" if missing else ""),
               duplicated=duplicated)
    assert killed
    assert lost == 0 and duplicated == 0 and code == 0
