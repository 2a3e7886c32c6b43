"""The streaming job before and after: an older commit's ``fencewatch run`` and this code's, interleaved.

This host's speed drifts within minutes (a shared 2-core machine), so a streaming figure taken
now cannot be compared with one taken an hour ago. This produces one backlog of simulator events
to one Apache Kafka broker (4.2, started by this code) and runs ``fencewatch run`` on it as a
subprocess, old, new, old, new, ..., seconds apart, at ``run``'s defaults (``local[2]``, the
adaptive micro-batches, trigger 1 s) but ``--starting-offsets earliest``, a fresh checkpoint and
verdict, alert and dead-letter topics of its own per run. The old code is a ``git worktree``
reached through a directory of symlinks named ``fencewatch`` first on ``PYTHONPATH``
(``ab_replay.py``); the new code is what this process imports (the installed package, or a
``PYTHONPATH`` given to this command, which the new side's runs inherit).

Each run is timed from the scrape of its metrics exporter: start-up (the process started to
the exporter answering: Python, the JVM, the Spark session) apart from the backlog (the exporter
answering to ``fencewatch_events_total`` + ``fencewatch_dlq_records_total`` covering every
event: query start, the adaptive limit's ramp-up and every micro-batch, outputs written). The
verdicts and alerts each run wrote are read back and compared: counts, verdict classes, and a
digest of the records (alerts decoded first: a side's default may write Avro or JSON).

    python bench/ab_streaming.py af6c70b [--events 200000] [--groups 50] [--rounds 3] [--write-docs]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ab_replay import finish, head, old_code  # noqa: E402
from bench.bench_streaming import simulate_lines  # noqa: E402

POLL_S = 0.25
RUN_TIMEOUT_S = 1800.0
SETTLE_S = 5.0  # after the last event: no new verdict or alert for this long (held events may follow), untimed
PARTITIONS = 4


def produce(bootstrap: str, lines: list[bytes], hb: str, off: str) -> None:
    """As ``fencewatch simulate --bootstrap-servers`` does: membership to heartbeats, the rest to
    offsets, keyed by group (no end markers: Apache Kafka's high watermark covers every record)."""
    from confluent_kafka import Producer

    from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    for line in lines:
        e = json.loads(line)
        p.produce(hb if e.get("type") in MEMBERSHIP_TYPES else off, key=(e.get("group_id") or "").encode(),
                  value=line)
        p.poll(0)
    if p.flush(120):
        raise RuntimeError("the producer did not deliver every event")


def scrape(port: int) -> dict[str, float] | None:
    """Sums of the counters the run is followed by; None while the exporter does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    sums = {"events": 0.0, "dlq": 0.0, "batches": 0.0, "judged": 0.0, "alerts": 0.0}
    names = {"fencewatch_events_total": "events", "fencewatch_dlq_records_total": "dlq",
             "fencewatch_batches_total": "batches", "fencewatch_commits_judged_total": "judged",
             "fencewatch_alerts_total": "alerts"}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            sums[names[name]] += float(line.rsplit(" ", 1)[1])
    return sums


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, reaped children included) of ``root``'s process tree."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        procs[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [p for p, (ppid, _) in procs.items() if ppid == pid and p not in tree]
    return sum(procs.get(pid, (0, 0.0))[1] for pid in tree)


def decode_alert(data: bytes) -> dict:
    """An alert as either side writes it at its defaults: Avro in the Confluent wire format (the
    old default, ``sinks.alerts_format: avro``) or JSON (``auto`` without a Schema Registry)."""
    from fencewatch.sinks.kafka import decode_alert_avro

    return decode_alert_avro(data) if data[:1] == b"\x00" else json.loads(data)


def read_topic(bootstrap: str, topic: str, decode=json.loads, field: str = "class") -> tuple[int, Counter, str]:
    """Records in ``topic`` (every partition to its high watermark): count, counts by ``field``, and
    an order-free digest of the records decoded and re-serialised as JSON with sorted keys."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ab-read-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen, classes, digest = {p: 0 for p in ends}, Counter(), 0
        deadline = time.monotonic() + 120
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in c.consume(10_000, timeout=1.0):
                if msg.error():
                    continue
                seen[msg.partition()] = msg.offset() + 1
                rec = decode(msg.value())
                classes[rec.get(field)] += 1
                canon = json.dumps(rec, sort_keys=True).encode()
                digest = (digest + int.from_bytes(hashlib.sha256(canon).digest()[:8], "big")) % 2**64
    finally:
        c.close()
    return sum(ends.values()), classes, f"{digest:016x}"


def run_job(pythonpath: str | None, broker, hb: str, off: str, n_events: int, tag: str, work: Path) -> dict:
    """One ``fencewatch run`` on the backlog, with the code on ``pythonpath`` (None: installed)."""
    from fencewatch.streaming.brokers.common import free_port

    outs = {k: f"ab-{k}-{tag}" for k in ("verdicts", "alerts", "dlq")}
    broker.create_topics(list(outs.values()), partitions=PARTITIONS)
    port = free_port()
    cmd = [sys.executable, "-m", "fencewatch.streaming.cli", "run", "--bootstrap-servers", broker.bootstrap,
           "--heartbeats-topic", hb, "--offsets-topic", off, "--starting-offsets", "earliest",
           "--checkpoint", str(work / f"cp-{tag}"), "--verdicts-topic", outs["verdicts"],
           "--alerts-topic", outs["alerts"], "--dlq-topic", outs["dlq"], "--metrics-port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FENCEWATCH_")}
    if os.environ.get("FENCEWATCH_JARS_DIR"):
        env["FENCEWATCH_JARS_DIR"] = os.environ["FENCEWATCH_JARS_DIR"]
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    log = work / f"run-{tag}.log"
    with open(log, "wb") as fh:
        t0 = time.monotonic()
        # cwd outside the checkout: the code is what PYTHONPATH or the installed package gives.
        proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        res = _follow(proc, port, n_events, t0, log)
    finally:
        _stop(proc)
    res["verdicts"], res["classes"], res["digest"] = read_topic(broker.bootstrap, outs["verdicts"])
    res["alerts"], res["alert_kinds"], res["alerts_digest"] = read_topic(broker.bootstrap, outs["alerts"],
                                                                         decode_alert, "kind")
    return res


def _follow(proc: subprocess.Popen, port: int, n_events: int, t0: float, log: Path) -> dict:
    """Times of the exporter's first answer and of the last event counted; then until the job
    settles (no verdict or alert for ``SETTLE_S``; the job runs a micro-batch each trigger, input or not)."""
    t_up = cpu_up = t_done = cpu_done = at_done = None
    last, last_change = None, None
    while True:
        if proc.poll() is not None:
            tail = log.read_bytes()[-3000:].decode(errors="replace")
            raise RuntimeError(f"the job exited ({proc.returncode}) before the end; its log ends:\n{tail}")
        now = time.monotonic()
        if now - t0 > RUN_TIMEOUT_S:
            raise RuntimeError(f"the job did not judge the backlog within {RUN_TIMEOUT_S:.0f} s ({log})")
        m = scrape(port)
        now = time.monotonic()
        if m is not None:
            if t_up is None:
                t_up, cpu_up = now, tree_cpu_s(proc.pid)
            if t_done is None and m["events"] + m["dlq"] >= n_events:
                t_done, cpu_done, at_done = now, tree_cpu_s(proc.pid), m
            if last is None or (m["judged"], m["alerts"]) != (last["judged"], last["alerts"]):
                last_change = now
            last = m
            if t_done is not None and now - last_change >= SETTLE_S:
                break
        time.sleep(POLL_S)
    return {"startup_s": t_up - t0, "backlog_s": t_done - t_up, "cpu_s": cpu_done - cpu_up,
            "events": int(last["events"]), "dlq": int(last["dlq"]), "batches": int(at_done["batches"])}


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the job's own process (as its docs ask), then whatever is left of its session."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # pyspark's JVM has a session of its own; it ends with the driver
    except ProcessLookupError:
        pass
    proc.wait()


def _interrupt(signum, _frame) -> None:
    """A SIGTERM unwinds like Ctrl-C: each job's session, the old worktree and the broker go."""
    raise KeyboardInterrupt(f"signal {signum}")


def new_code_note() -> str:
    import fencewatch.streaming as pkg

    where = Path(pkg.__file__).resolve().parent.parent
    return f"new code from {where}" + ("" if where == ROOT else f" (not this checkout, {ROOT})")


def table(args, rows: list[dict]) -> list[str]:
    lines = [f"backlog: {args.events:,} simulated events (profile mixed, {args.groups} groups, seed 5), "
             f"{PARTITIONS} partitions per input topic, one Apache Kafka 4.2 broker; `fencewatch run` at its "
             "defaults (local[2], adaptive micro-batches, trigger 1 s) with --starting-offsets earliest, a fresh "
             "checkpoint and its own output topics per run; start-up = process start to the metrics exporter "
             "answering (not in the rate); backlog = exporter answering to every event counted; CPU = the "
             "run's process tree (driver, JVM, Python workers) over the backlog",
             f"{'round':<6}{'code':<20}{'start-up s':>11}{'backlog s':>10}{'events/s':>10}{'CPU us/ev':>10}"
             f"{'batches':>8}{'verdicts':>10}{'alerts':>8}  digest"]
    for r in rows:
        lines.append(f"{r['round']:<6}{r['label']:<20}{r['startup_s']:>11.1f}{r['backlog_s']:>10.1f}"
                     f"{r['rate']:>10,.0f}{r['cpu_s'] / args.events * 1e6:>10,.0f}{r['batches']:>8}"
                     f"{r['verdicts']:>10,}{r['alerts']:>8,}  {r['digest']}")
    ratios, cpu_ratios = [], []
    for i in range(1, args.rounds + 1):
        old, cur = (next(r for r in rows if r["round"] == i and r["side"] == s) for s in ("old", "new"))
        ratios.append(cur["rate"] / old["rate"])
        cpu_ratios.append(old["cpu_s"] / cur["cpu_s"])
    lines.append("new/old events/s per round: " + ", ".join(f"{x:.3f}" for x in ratios)
                 + f"; median {statistics.median(ratios):.3f}")
    lines.append("old/new CPU per event per round: " + ", ".join(f"{x:.3f}" for x in cpu_ratios)
                 + f"; median {statistics.median(cpu_ratios):.3f}")
    keys = {(r["verdicts"], tuple(sorted(r["classes"].items())), r["digest"]) for r in rows}
    lines.append("verdicts: " + ("identical in every run (count, classes, digest)" if len(keys) == 1 else
                                 "DIFFER between runs (see the table)"))
    alerts = {(r["alerts"], r["alerts_digest"]) for r in rows}
    lines.append("alerts: " + ("identical in every run (count, digest of the decoded records)" if len(alerts) == 1 else
                               "differ between runs (round, code, digest, count by kind): " + "; ".join(
                                   f"{r['round']} {r['side']} {r['alerts_digest']} "
                                   + " ".join(f"{k} {v}" for k, v in sorted(r["alert_kinds"].items()))
                                   for r in rows)))
    classes = rows[0]["classes"]
    lines.append("verdict classes (first run): " + ", ".join(f"{k} {v:,}" for k, v in sorted(classes.items())))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the commit to compare against")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3, help="old/new pairs")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    from fencewatch.streaming.brokers.kafka import KafkaBroker

    signal.signal(signal.SIGTERM, _interrupt)  # the broker's own handler stops it, then calls this

    new, note = head(), new_code_note()
    print(note, file=sys.stderr)
    rows: list[dict] = []
    with old_code(args.old, prefix="fw-abs-") as (tmp, old_pp), KafkaBroker(version="4.2") as broker:
        lines = simulate_lines("mixed", args.events, args.groups)
        if len(lines) != args.events:
            raise SystemExit(f"the simulator gave {len(lines):,} events, not {args.events:,}")
        hb, off = "ab-heartbeats", "ab-offsets"
        broker.create_topics([hb, off], partitions=PARTITIONS)
        produce(broker.bootstrap, lines, hb, off)
        del lines
        head_lines = [f"load average at start: {os.getloadavg()[0]:.2f}", note]
        pp_new = os.environ.get("PYTHONPATH") or None
        for i in range(1, args.rounds + 1):
            for side, label, pp in (("old", f"{args.old} (before)", str(old_pp)), ("new", f"{new}+ (after)", pp_new)):
                res = run_job(pp, broker, hb, off, args.events, f"{side}{i}", tmp)
                res.update(round=i, side=side, label=label, rate=args.events / res["backlog_s"],
                           load=os.getloadavg()[0])
                rows.append(res)
                print(f"{i} {label}: {res['rate']:,.0f} events/s, start-up {res['startup_s']:.1f} s, "
                      f"{res['verdicts']:,} verdicts, load {res['load']:.2f}", file=sys.stderr)
    out = head_lines + table(args, rows)
    out.append("load average after each run: " + ", ".join(f"{r['load']:.2f}" for r in rows))
    finish(out, f"streaming job A/B against {args.old} (run's defaults, backlog)",
           f"python bench/ab_streaming.py {args.old} --events {args.events} --groups {args.groups} "
           f"--rounds {args.rounds}", args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
