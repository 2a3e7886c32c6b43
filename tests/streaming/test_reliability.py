"""The always-on job under poison input and faults, through the public command ``fencewatch run``
on the test broker (real Spark), once with each Kafka reader (``kafka_source``: fencewatch-kafka and
Spark's own connector). Each test adds its cell to docs/reliability.md's row, one column per reader."""
from __future__ import annotations

import json
import signal
import time
from dataclasses import replace

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from reliability_harness import (RunProcess, committed_records, parity, parity_cells, produce_clock, produce_events,
                                 read_outputs, read_topic, record_row, run_args, verdict_keys, wait_for)

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


def traffic(broker: str, topic_factory, *, groups: int, n: int, seed: int) -> tuple[dict, list[dict], set]:
    """Fresh topics with a simulated trace on the inputs, closed by one clock record per partition:
    (topics, events, the verdict keys expected)."""
    topics = make_topics(topic_factory)
    events = sim_events(groups=groups, n=n, seed=seed)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    return topics, events, expected_verdicts(events)


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
def test_900kb_member_id_among_good_events_keeps_the_job_alive(broker, topic_factory, tmp_path, kafka_source):
    topics = make_topics(topic_factory)
    good = sim_events(groups=2, n=2000)
    poison = poison_assignment(good)
    half = len(good) // 2
    produce_events(broker, topics["hb"], topics["off"], good[:half] + [poison] + good[half:])
    produce_clock(broker, [topics["hb"], topics["off"]], good[-1]["ts"] + 5_000)
    expected = expected_verdicts(good)

    run = RunProcess(run_args(broker, topics, tmp_path / "cp", source=kafka_source), tmp_path / "run.log")
    stop_s, code, dead = float("nan"), None, []
    try:
        wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected), timeout=240, every=3, proc=run)
        dead = read_topic(broker, topics["dlq"])
        assert run.alive(), run.log()[-3000:]
        t0 = time.monotonic()
        run.signal(signal.SIGTERM, group=True)  # as `kill -- -PGID`: the JVM must not stop under the batch
        code = run.wait(30)
        stop_s = time.monotonic() - t0
    finally:
        run.kill()
    verdicts, alert_ids = read_outputs(broker, topics)
    p = parity(broker, topics, verdicts, alert_ids)
    alerts = [json.loads(m.value()) for m in read_topic(broker, topics["alerts"])]
    record_row("poison_900kb_member_id", load=f"{len(good):,} sim events + 1 with a 900 KB member_id",
               fault="poison record; then SIGTERM to the process group",
               outcome=f"alive; the poison record in the DLQ ({len(dead)} dead letter); stopped in {stop_s:.1f} s, "
                       f"exit {code}", **parity_cells(p), source=kafka_source)
    assert_parity(p)
    assert code == 0, run.log()[-3000:]
    assert_read_by(run, kafka_source)
    (letter,) = dead
    assert json.loads(letter.value())["event_id"] == "poison"
    reason = dict(letter.headers())["fencewatch.reason"].decode()
    assert reason.startswith("FIELD_TOO_LONG") and "field=member_id" in reason, reason
    # where it was read: its topic, partition and offset, on either reader (the connector's
    # coordinates are made in the router from the record's event id)
    where = dict(letter.headers())["fencewatch.source"].decode()
    (poison_at,) = [f"{m.topic()}[{m.partition()}]@{m.offset()}"
                    for t in (topics["hb"], topics["off"]) for m in read_topic(broker, t)
                    if json.loads(m.value()).get("event_id") == "poison"]
    assert where == poison_at, (where, poison_at)
    assert all(len(json.dumps(a)) < 100_000 for a in alerts)
    assert stop_s < 15, stop_s
    after_stop = run.log().split("SIGTERM: stopping")[-1]
    assert "SPARK_JOB_CANCELLED" not in run.log() and "Traceback" not in run.log(), run.log()[-3000:]
    assert "\tat " not in after_stop and "Exception" not in after_stop, after_stop[-3000:]
    assert "Spark stopped before the query did" not in after_stop, after_stop[-3000:]


# --------------------------------------------------------------------------- faults

def in_flight(checkpoint) -> bool:
    """A micro-batch is planned and not yet committed (the moment to kill)."""
    offsets = {p.name for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {p.name for p in (checkpoint / "commits").glob("[0-9]*")}
    return bool(offsets - commits) and len(commits) >= 1


def finish_and_compare(broker, topics, run, expected, timeout=300):
    """Wait for every expected verdict, stop with SIGTERM; (parity with the engine, exit code)."""
    try:
        wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected), timeout=timeout,
                 every=3, proc=run)
        run.signal(signal.SIGTERM)
        code = run.wait(30)
    finally:
        run.kill()
    verdicts, alerts = read_outputs(broker, topics)
    return parity(broker, topics, verdicts, alerts), code


def assert_read_by(run: RunProcess, kafka_source: str) -> None:
    """The job's start-up line names the reader the test asked for."""
    name = "Spark's Kafka connector" if kafka_source == "spark" else "fencewatch-kafka"
    assert f"Kafka read by {name}" in run.log(), run.log()[:3000]


def assert_parity(p: dict) -> None:
    assert p["lost"] == 0 and p["duplicated"] == 0 and p["differing"] == 0, p
    assert p["expected_alerts"] > 0, "the trace must raise alerts for the comparison to mean something"


def _source_runners(pid: int) -> list[int]:
    return [p for p, cmd in _descendants(pid) if "python_streaming_source_runner" in cmd]


def _python_workers(pid: int) -> list[int]:
    """Spark's Python worker daemon (its workers die with it): with Spark's connector the only
    Python processes a micro-batch runs in are the router's and the state function's."""
    return [p for p, cmd in _descendants(pid) if " -m fencewatch.streaming.runtime.worker_daemon" in cmd
            or " -m pyspark.daemon" in cmd]  # (the JVM's command line names the module too: not it)


@pytest.mark.slow
def test_sigkill_mid_batch_three_times_then_restart(broker, topic_factory, tmp_path, kafka_source):
    """SIGKILL of the whole process group with a batch in flight, three times; then, in the run
    that finishes, SIGKILL of Spark's Python source runner alone (with Spark's connector, which
    has none, of the Python worker daemon): the query fails and ``run`` restarts it from the
    checkpoint in the same process. One trace, one engine comparison."""
    import os

    topics, events, expected = traffic(broker, topic_factory, groups=3, n=6_000, seed=5)
    cp = tmp_path / "cp"
    args = run_args(broker, topics, cp, "--max-offsets-per-trigger", "600", source=kafka_source)
    done = cp / "commits"
    kills = 0
    for attempt in range(3):
        run = RunProcess(args, tmp_path / f"run{attempt}.log")
        before = len(list(done.glob("[0-9]*"))) if done.exists() else 0
        # Kill with a batch in flight, once this run has committed a batch of its own.
        hit = wait_for(lambda: len(list(done.glob("[0-9]*"))) > before and in_flight(cp), timeout=240, every=0.05,
                       proc=run)
        assert run.alive(), run.log()[-3000:]
        run.kill()
        kills += bool(hit)
    run = RunProcess(args, tmp_path / "final.log")
    killed = []
    try:
        before = len(list(done.glob("[0-9]*")))
        assert wait_for(lambda: len(list(done.glob("[0-9]*"))) > before, timeout=240, every=0.5, proc=run), \
            run.log()[-3000:]
        victims = _source_runners if kafka_source == "python" else _python_workers
        for pid in victims(run.proc.pid):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    finally:
        if not killed:
            run.kill()
    p, code = finish_and_compare(broker, topics, run, expected)
    restarted = "restarting the query from its checkpoint" in run.log()
    victim = "Spark's Python source runner" if kafka_source == "python" else "Spark's Python worker daemon"
    record_row("sigkill_mid_batch_x3", load=f"{len(events):,} sim events, 600 offsets per trigger",
               fault=f"SIGKILL of the process group with a batch in flight, {kills} times; restart; then SIGKILL "
                     f"of Spark's Python source runner (fencewatch-kafka) or worker daemon (Spark's connector)",
               outcome=f"resumed from the checkpoint; {victim} killed ({len(killed)} process"
                       f"{'es' if len(killed) > 1 else ''}): "
                       f"{'query failed and restarted in the same process' if restarted else 'query survived the kill'}; "
                       f"exit {code} on SIGTERM", **parity_cells(p), source=kafka_source)
    assert kills == 3 and killed
    assert_parity(p)
    assert code == 0


WRITE_POINTS = {  # killpoints.POINTS, as the table says them
    "begin": "before its first record (logged pending)",
    "mid": "with part of its verdicts delivered",
    "inflight": "with part of its verdicts handed to the producer, not waited for",
    "delivered": "after its last delivery, before it was logged done",
    "logged": "after it was logged done, before Spark's commit",
}


@pytest.mark.slow
def test_sigkill_while_the_last_batch_is_written(broker, topic_factory, tmp_path, kafka_source):
    """The operator's trial of issue 33, shortened: a backlog's last micro-batch (it reads every
    topic to its end, so it releases at once the events held for the groups whose heartbeats
    stopped earlier) is killed at each point of its write in turn, the whole job with SIGKILL. The
    trace comes in five parts, produced while the job is down, so each point hits a batch's first
    attempt. Before the fix, a batch run again after the kill kept those events (its planned
    caught-up mark was gone) and they were written twice a batch later; on Spark's connector, until
    its first attempt's mark was kept in the checkpoint (9 twice)."""
    import os

    topics = make_topics(topic_factory)
    events = sim_events(groups=3, n=5_000, seed=11)
    cp, parts = tmp_path / "cp", len(WRITE_POINTS)
    args = run_args(broker, topics, cp, "--max-offsets-per-trigger", "400", source=kafka_source)
    env = {"KILLPOINTS_LAST": "1", "KILLPOINTS_FRESH": "1", "KILLPOINTS_LINES": "150"}
    hits, logs = [], []
    for i, point in enumerate(WRITE_POINTS):
        part = events[i * len(events) // parts:(i + 1) * len(events) // parts]
        produce_events(broker, topics["hb"], topics["off"], part)
        produce_clock(broker, [topics["hb"], topics["off"]], part[-1]["ts"] + 5_000)
        flag = tmp_path / f"arm-{point}"
        flag.touch()
        run = RunProcess(args, tmp_path / f"run-{point}.log", env=env, kill_at=(point, flag))
        code = run.wait(300)
        run.kill()
        logs.append(run.log())
        hits += [line for line in logs[-1].splitlines() if line.startswith("killpoints: SIGKILL")]
        assert code == -signal.SIGKILL, logs[-1][-3000:]
    run = RunProcess(args, tmp_path / "final.log")
    killed = max(int(f.name) for f in (cp / "offsets").glob("[0-9]*"))  # logged done, not committed by Spark
    assert wait_for(lambda: (cp / "commits" / str(killed)).exists(), timeout=240, every=0.5, proc=run), \
        run.log()[-3000:]
    p, code = finish_and_compare(broker, topics, run, expected_verdicts(events))
    logs.append(run.log())
    resumed = sum("was being written when the job stopped" in log for log in logs)
    skipped = sum("already written to Kafka, skipped" in log for log in logs)
    external = os.environ.get("FENCEWATCH_TEST_BOOTSTRAP")  # the conftest's broker: an external one (Apache Kafka)
    record_row("sigkill_while_writing_last_batch" + ("_external_broker" if external else ""),
               load=f"{len(events):,} sim events in {parts} parts produced while the job was down, 400 offsets per "
                    f"trigger{', external broker' if external else ''}",
               fault="SIGKILL of the whole job while each part's last batch (caught up: it releases the held "
                     "events) was being written: " + "; ".join(WRITE_POINTS.values()),
               outcome=f"{len(hits)} kills landed; after restart {resumed} batches completed from what was in "
                       f"Kafka, {skipped} skipped as written; exit {code}", **parity_cells(p), source=kafka_source)
    assert len(hits) == parts, hits
    assert resumed >= 3 and skipped >= 1, (resumed, skipped)
    assert_parity(p)
    assert code == 0


@pytest.mark.slow
def test_broker_paused_60s(topic_factory, tmp_path, kafka_source):
    import os

    from fencewatch.streaming.brokers.tansu import EmbeddedBroker

    with EmbeddedBroker() as paused:
        bootstrap = paused.bootstrap
        topics = {k: f"{k}-p" for k in ("hb", "off", "verdicts", "alerts", "dlq")}
        paused.create_topics([topics["hb"], topics["off"], topics["verdicts"]], partitions=2)
        paused.create_topics([topics["alerts"], topics["dlq"]], partitions=1)
        events = sim_events(groups=2, n=4_000, seed=7)
        first, second = events[:2_000], events[2_000:]
        produce_events(bootstrap, topics["hb"], topics["off"], first)
        produce_clock(bootstrap, [topics["hb"], topics["off"]], first[-1]["ts"])  # the first half visible whole
        run = RunProcess(run_args(bootstrap, topics, tmp_path / "cp", "--max-offsets-per-trigger", "500",
                                  source=kafka_source), tmp_path / "run.log")
        try:
            # Paused once the first half is read: with part of it still unread, the batches that run
            # without input during the outage fire the groups' state timeouts, and a group quiet for
            # two of them releases its held events though the other topic has older ones further on
            # in its backlog (docs/reliability.md, "What is not exact"; seen in a clean-clone run on a loaded host,
            # 2026-11-25: 4 of 15,288 verdicts differing). That is the quiet rule, not the outage this tests.
            assert wait_for(lambda: committed_records(tmp_path / "cp") >= len(first) + 4, timeout=240, every=0.5,
                            proc=run)  # + one clock record per partition
            os.kill(paused.pid, signal.SIGSTOP)
            time.sleep(60)
            alive_during = run.alive()
            os.kill(paused.pid, signal.SIGCONT)
            produce_events(bootstrap, topics["hb"], topics["off"], second)
            produce_clock(bootstrap, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
            expected = expected_verdicts(events)
            p, code = finish_and_compare(bootstrap, topics, run, expected)
        finally:
            run.kill()
    record_row("broker_paused_60s", load=f"{len(events):,} sim events, half before and half after the pause",
               fault="broker SIGSTOP for 60 s mid-stream, then SIGCONT",
               outcome=f"waited and resumed; {'alive' if alive_during else 'DIED'} during the pause; exit {code}",
               **parity_cells(p), source=kafka_source)
    assert alive_during
    assert_parity(p)
    assert code == 0


@pytest.mark.slow
def test_checkpoint_bound_recovers_an_oversized_planned_batch(broker, topic_factory, tmp_path, kafka_source):
    import subprocess

    from reliability_harness import FENCEWATCH

    topics, events, expected = traffic(broker, topic_factory, groups=3, n=12_000, seed=9)
    cp = tmp_path / "cp"
    # Planned with no effective limit: batch 0 is the whole backlog; killed while it runs.
    run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "100000000", source=kafka_source),
                     tmp_path / "run0.log")
    planned = wait_for(lambda: (cp / "offsets" / "0").exists() and not (cp / "commits" / "0").exists(),
                       timeout=240, every=0.05, proc=run)
    run.kill()
    assert planned and not (cp / "commits" / "0").exists(), "batch 0 committed before the kill"
    show = subprocess.run(FENCEWATCH + ["checkpoint", "show", "--checkpoint", str(cp)], capture_output=True,
                          text=True, timeout=60)
    assert json.loads(show.stdout)["records"] >= len(events) and json.loads(show.stdout)["uncommitted"]
    assert json.loads(show.stdout)["kafka_source"] == kafka_source
    bound = subprocess.run(FENCEWATCH + ["checkpoint", "bound", "--checkpoint", str(cp),
                                         "--max-offsets-per-partition", "1000"], capture_output=True, text=True,
                           timeout=60)
    planned = json.loads((cp / "offsets" / "0.unbounded").read_text().split("\n")[2])
    bounded = sum(min(int(o), 1_000) for parts in planned.values() if isinstance(parts, dict) for o in parts.values())
    assert bound.returncode == 0 and f"now {bounded:,} (" in bound.stdout, bound.stdout + bound.stderr
    run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "4000", source=kafka_source),
                     tmp_path / "run1.log")
    p, code = finish_and_compare(broker, topics, run, expected)
    first = json.loads((cp / "offsets" / "0").read_text().split("\n")[2])
    # The Python source marks a caught-up batch in its offsets; cut, it is no longer caught up.
    # (Spark's connector keeps no mark in its offsets.)
    assert ("fencewatch:caught_up" in planned) == (kafka_source == "python") and "fencewatch:caught_up" not in first
    assert sum(int(o) for parts in first.values() for o in parts.values()) == bounded < len(events)
    record_row("checkpoint_bound_oversized_batch", load=f"{len(events):,}-record backlog planned as one batch",
               fault="SIGKILL during the oversized batch 0; `fencewatch checkpoint bound` to 1,000 per partition",
               outcome=f"batch 0 replayed with {bounded:,} records, the rest in later batches; exit {code}",
               **parity_cells(p), source=kafka_source)
    assert_parity(p)
    assert code == 0


def logged_verdicts(run: RunProcess) -> int:
    """The job's own count of verdicts written, from its last progress line."""
    import re

    found = re.findall(r"verdicts (\d+) \(", run.log())
    return int(found[-1]) if found else 0


@pytest.mark.slow
def test_300k_backlog_with_run_defaults(broker, topic_factory, tmp_path, kafka_source):
    """The backlog that once ran the driver out of heap (the whole backlog was batch 0 and was
    collected at once): with ``run``'s defaults (a default ``maxOffsetsPerTrigger``, batches read
    in chunks), the job reads it and judges every event."""
    topics, events, expected = traffic(broker, topic_factory, groups=20, n=300_000, seed=13)
    n_events = len(events)
    del events
    args = [a for a in run_args(broker, topics, tmp_path / "cp", source=kafka_source) if a not in ("--trigger", "500ms")]
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
               verdicts=f"{len(set(got)):,} of {len(expected):,}", alerts="-", lost=lost, duplicated=duplicated,
               source=kafka_source)
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
def test_executor_killed_on_standalone_cluster(broker, topic_factory, tmp_path, tmp_path_factory, kafka_source):
    """One executor JVM of a standalone cluster (master + 2 workers on loopback) SIGKILLed
    mid-stream: Spark reruns its tasks on a new executor; the engine's verdicts and alerts, once
    each (the engine is the baseline: no second cluster run without the fault)."""
    import os

    from test_standalone_cluster import cluster as _cluster_fixture

    gen = _cluster_fixture.__wrapped__(tmp_path_factory)
    url, env = next(gen)
    try:
        topics, events, expected = traffic(broker, topic_factory, groups=3, n=6_000, seed=23)
        cp = tmp_path / "cp"
        run = RunProcess(run_args(broker, topics, cp, "--max-offsets-per-trigger", "600", "--spark-master", url,
                                  source=kafka_source), tmp_path / "run.log", env=env)
        killed = []
        try:
            assert wait_for(lambda: (cp / "commits" / "1").exists(), timeout=400, every=0.5, proc=run), \
                run.log()[-3000:]
            executors = [pid for pid, cmd in _descendants(os.getpid()) if "CoarseGrainedExecutorBackend" in cmd]
            if executors:
                os.kill(executors[0], signal.SIGKILL)
                killed.append(executors[0])
        finally:
            if not killed:
                run.kill()
        p, code = finish_and_compare(broker, topics, run, expected, timeout=400)
    finally:
        next(gen, None)  # the fixture's teardown: stop the cluster
    record_row("standalone_cluster_executor_killed", load=f"{len(events):,} sim events, 600 offsets per trigger, "
               "standalone cluster (2 workers)", fault="SIGKILL of one executor JVM mid-stream",
               outcome=f"tasks rerun on a new executor; exit {code}", **parity_cells(p), source=kafka_source)
    assert killed
    assert_parity(p)
    assert code == 0
