"""The operator's SIGKILL trial (issue 33 item 5), scripted: a simulated backlog in the input
topics, ``fencewatch run`` with its defaults, killed at chosen moments and restarted on the same
checkpoint, then the verdicts topic read to its end and compared with the local engine.

    .venv/bin/python tests/streaming/trial_sigkill.py --events 200000 \
        --kill now@120000 --kill delivered-last@50000 [--bootstrap HOST:PORT] [--code REV] [--workdir DIR]

``--kill POINT@N`` (repeatable, in order): once the job has committed N input records, ``now``
SIGKILLs the whole job at that moment (wherever the running batch is); any other point of
``killpoints.POINTS`` kills the next batch the sink begins at that point of its write (``POINT-last``:
the next batch planned to the logs' ends, the last of the backlog; N must be reached before that
batch begins: ``@0`` for a backlog read in one or two batches). Each kill
is followed by a restart on the same checkpoint; the last run goes to the end and gets SIGTERM.
Without ``--bootstrap`` an embedded Tansu broker is started (and, before each restart, one record
is produced to every verdicts partition, as the operator did, so that Tansu shows its last batch).

Prints one JSON document: lost, duplicated and differing verdicts by (event_id, topic, partition)
against ``LocalEngine`` (``replay --engine local``) on the same records, the classes of both, each
kill's moment and sink log, and where every duplicated verdict's copies sit in the topic.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from reliability_harness import (FENCEWATCH, _verdict_key, committed_records, engine_reference,  # noqa: E402
                                 read_topic, wait_for)

PY = sys.executable
CODE_ENV: dict = {}  # PYTHONPATH of another revision's code (--code)
_JOBS: list = []  # every job started, stopped at the end whatever happened


def _all_pids(root: int) -> list[int]:
    from killpoints import _descendants

    return [root, *_descendants(root)]


class Job:
    """One ``fencewatch run`` (through ``killpoints`` when a point is armed), in its own session."""

    def __init__(self, args: list[str], log: Path, point: str | None, flag: Path, group_only: bool = False,
                 last: bool = False):
        cmd = [PY, str(HERE / "killpoints.py"), point, str(flag), "run", *args] if point else FENCEWATCH + ["run", *args]
        self.log = log
        self._out = open(log, "ab")
        env = {**os.environ, **CODE_ENV, "KILLPOINTS_GROUP_ONLY": "1" if group_only else "0",
               "KILLPOINTS_LAST": "1" if last else "0"}
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        _JOBS.append(self)

    def crash(self, group_only: bool = False) -> None:
        """SIGKILL the driver's group and every process under it (Spark's JVM has a session of its
        own); ``group_only``: the group alone, as ``kill -9 -- -PGID`` (the JVM exits when it sees
        its driver gone)."""
        pids = _all_pids(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if group_only:
            self.proc.wait(30)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reap(pids)

    def _reap(self, pids: list[int]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in pids):
            time.sleep(0.1)

    def stop(self, timeout: float = 60) -> int | None:
        pids = _all_pids(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        self.crash()
        self._out.close()
        return code

    def alive(self) -> bool:
        return self.proc.poll() is None


def _state(pid: int) -> str:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return "Z"
    return stat[stat.rfind(")") + 2:].split()[0]


def poke(bootstrap: str, topic: str) -> None:
    """One record to every partition (Tansu then shows a partition's last produce batch)."""
    from confluent_kafka import Consumer, Producer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.close()
    p = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0})
    for part in parts:
        p.produce(topic, value=json.dumps({"event_id": "poke", "topic": "-", "partition": part}).encode(),
                  partition=part)
        p.flush(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--profile", default="mixed")
    ap.add_argument("--kill", action="append", default=[], metavar="POINT@RECORDS")
    ap.add_argument("--bootstrap", help="an external broker (default: an embedded Tansu broker)")
    ap.add_argument("--workdir", default=f"/tmp/eos/trial-{uuid.uuid4().hex[:6]}")
    ap.add_argument("--no-poke", action="store_true", help="no record to the verdicts partitions before a restart")
    ap.add_argument("--run-arg", action="append", default=[], help="extra `fencewatch run` argument (repeatable)")
    ap.add_argument("--group-only", action="store_true",
                    help="SIGKILL the driver's process group only (Spark's JVM exits by itself), as the operator did")
    ap.add_argument("--code", metavar="REV", help="run another revision's fencewatch (e.g. main: the numbers before)")
    ap.add_argument("--timeout", type=float, default=1_800)
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if a.code:
            sys.path.insert(0, str(HERE.parents[1]))
            from bench.ab_replay import old_code

            _, pythonpath = stack.enter_context(old_code(a.code, prefix="eos-trial-"))
            CODE_ENV["PYTHONPATH"] = str(pythonpath)
        bootstrap = a.bootstrap
        if bootstrap is None:
            from fencewatch.streaming.brokers.tansu import EmbeddedBroker

            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
        report = trial(a, bootstrap, work)
    print(json.dumps(report, indent=1))
    return 0 if report["lost"] == 0 and report["duplicated"] == 0 else 1


def trial(a, bootstrap: str, work: Path) -> dict:
    from fencewatch.streaming.brokers.common import create_topics

    tag = uuid.uuid4().hex[:6]
    topics = {k: f"trial-{tag}.{k}" for k in ("hb", "off", "verdicts", "alerts", "dlq")}
    create_topics({"bootstrap.servers": bootstrap}, [topics["verdicts"]], 4)
    create_topics({"bootstrap.servers": bootstrap}, [topics["alerts"], topics["dlq"]], 1)
    sim = [*FENCEWATCH, "simulate", "--profile", a.profile, "--groups", str(a.groups), "--seed", str(a.seed),
           "--events", str(a.events)]
    t0 = time.monotonic()
    subprocess.run([*sim, "--bootstrap-servers", bootstrap, "--heartbeats-topic", topics["hb"],
                    "--offsets-topic", topics["off"], "--quiet"], check=True, timeout=600, env={**os.environ, **CODE_ENV})
    produced_s = time.monotonic() - t0
    cp = work / "cp"
    args = ["--bootstrap-servers", bootstrap, "--heartbeats-topic", topics["hb"], "--offsets-topic", topics["off"],
            "--verdicts-topic", topics["verdicts"], "--alerts-topic", topics["alerts"], "--dlq-topic", topics["dlq"],
            "--alerts-format", "json", "--starting-offsets", "earliest", "--checkpoint", str(cp),
            "--metrics-port", "0", *a.run_arg]
    try:
        return _kill_and_compare(a, bootstrap, topics, args, cp, work, produced_s)
    finally:
        for j in _JOBS:
            if j.alive():
                j.crash()


def _kill_and_compare(a, bootstrap: str, topics: dict, args: list[str], cp: Path, work: Path,
                      produced_s: float) -> dict:
    kills = []
    for i, spec in enumerate(a.kill):
        point, _, at = spec.partition("@")
        flag = work / f"flag{i}"
        last = point.endswith("-last")
        point = point.removesuffix("-last")
        job = Job(args, work / f"run{i}.log", None if point == "now" else point, flag, a.group_only, last)
        reached = wait_for(lambda: committed_records(cp) >= int(at), timeout=a.timeout, every=0.2)
        committed = committed_records(cp)
        if point == "now":
            job.crash(group_only=a.group_only)
        else:
            flag.touch()
            job.proc.wait(a.timeout)
            if not a.group_only:
                job.crash()  # whatever the hook left (it kills everything itself)
        log = (cp / "fencewatch-sink" / "state.json")
        kills.append({"point": point, "at": int(at), "reached": bool(reached), "committed_before": committed,
                      "sink_log": json.loads(log.read_text()) if log.exists() else None,
                      "hook": [ln for ln in job.log.read_text(errors="replace").splitlines() if "killpoints:" in ln],
                      "planned": sorted(int(p.name) for p in (cp / "offsets").glob("[0-9]*"))[-1:],
                      "committed": sorted(int(p.name) for p in (cp / "commits").glob("[0-9]*"))[-1:]})
        if a.bootstrap is None and not a.no_poke:
            poke(bootstrap, topics["verdicts"])
    job = Job(args, work / "final.log", None, work / "unused")
    total = a.events
    wait_for(lambda: committed_records(cp) >= total, timeout=a.timeout, every=1, proc=None)
    time.sleep(20)  # the held events' release (a few more batches); then read to the end
    code = job.stop()
    return compare(bootstrap, topics, kills, code, produced_s, work)


def compare(bootstrap: str, topics: dict, kills: list, code, produced_s: float, work: Path) -> dict:
    from fencewatch.sinks.jsonl import commit_verdicts_block

    records = [m for m in read_topic(bootstrap, topics["verdicts"], 3.0)]
    got: dict = {}
    for m in records:
        v = json.loads(m.value())
        if v.get("event_id") == "poke":
            continue
        got.setdefault(_verdict_key(v), []).append((m.partition(), m.offset(), v))
    out = engine_reference(bootstrap, topics["hb"], topics["off"])
    want = {_verdict_key(v): v for cv in out.commits if cv.parts
            for v in map(json.loads, commit_verdicts_block(cv).split("\n"))}
    dups = {k: c for k, c in got.items() if len(c) > 1}
    alerts = Counter(json.loads(m.value())["alert_id"] for m in read_topic(bootstrap, topics["alerts"], 2.0))
    want_alerts = {a.alert_id for a in out.alerts}
    differing = [k for k, v in want.items() if k in got and got[k][0][2] != v]
    same_copies = sum(1 for c in dups.values() if all(x[2] == c[0][2] for x in c))
    (work / "twice.json").write_text(json.dumps([c for c in dups.values()]))
    where = Counter()
    for c in dups.values():
        for part, off, _ in c:
            where[f"p{part}@{off // 1000 * 1000}"] += 1
    return {
        "code": CODE_ENV.get("PYTHONPATH", "this checkout"), "broker": bootstrap, "topics": topics, "produced_s": round(produced_s, 1), "exit": code,
        "verdicts_written": len(records), "distinct": len(got), "expected": len(want),
        "lost": len(want.keys() - got.keys()), "duplicated": sum(len(c) - 1 for c in dups.values()),
        "duplicated_keys": len(dups), "twice_with_equal_copies": same_copies,
        "differing": len(differing), "unexpected": len(got.keys() - want.keys()),
        "alerts": len(alerts), "alerts_expected": len(want_alerts), "alerts_lost": len(want_alerts - alerts.keys()),
        "alerts_duplicated": sum(n - 1 for n in alerts.values()),
        "classes_job": dict(Counter(c[0][2]["class"] for c in got.values())),
        "classes_engine": dict(Counter(v["class"] for v in want.values())),
        "kills": kills, "dup_sample": [[list(map(list, (x[:2] for x in c))), c[0][2], c[1][2]]
                                       for c in list(dups.values())[:3]],
        "dup_offsets": dict(sorted(where.items())[:40]), "workdir": str(work),
    }


if __name__ == "__main__":
    sys.exit(main())
