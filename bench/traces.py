"""Deterministic benchmark traces of the size the rules-engine issue names.

1,000 groups x 20 members x 10 partitions each = 20,000 members and 200,000
held partitions; every member commits its 10 partitions per round, and every
few rounds a member's epoch moves (heartbeat race) so some commits are stale.
"""
from __future__ import annotations

import json
import random
from pathlib import Path


def write_trace(path: Path, *, groups: int = 1000, members: int = 20, partitions_per_member: int = 10,
                rounds: int = 15, seed: int = 1) -> dict:
    rnd = random.Random(seed)
    n_events = n_commit_partitions = 0
    ts = 1_700_000_000_000
    with open(path, "w") as fh:
        epochs = {}
        for g in range(groups):
            gid = f"group-{g:04d}"
            for m in range(members):
                mid = f"{gid}-member-{m:02d}"
                parts = list(range(m * partitions_per_member, (m + 1) * partitions_per_member))
                epochs[(gid, mid)] = 1
                fh.write(json.dumps({"type": "member_assignment", "ts": ts, "group_id": gid, "member_id": mid,
                                     "protocol": "consumer", "member_epoch": 1, "state": "STABLE",
                                     "assigned": [{"topic": f"{gid}-topic", "partitions": parts}],
                                     "pending_revocation": []}) + "\n")
                n_events += 1
                ts += 1
        for r in range(rounds):
            for g in range(groups):
                gid = f"group-{g:04d}"
                for m in range(members):
                    mid = f"{gid}-member-{m:02d}"
                    parts = range(m * partitions_per_member, (m + 1) * partitions_per_member)
                    e = epochs[(gid, mid)]
                    if rnd.random() < 0.02:  # the broker bumps the epoch while a commit is in flight
                        epochs[(gid, mid)] = e + 1
                        fh.write(json.dumps({"type": "member_assignment", "ts": ts, "group_id": gid,
                                             "member_id": mid, "protocol": "consumer", "member_epoch": e + 1,
                                             "assigned": [{"topic": f"{gid}-topic", "partitions": list(parts)}],
                                             "pending_revocation": []}) + "\n")
                        n_events += 1
                        ts += 1
                    c = e
                    fh.write(json.dumps({"type": "offset_commit", "ts": ts, "group_id": gid, "member_id": mid,
                                         "member_epoch": c, "error_code": 0 if c == epochs[(gid, mid)] else 113,
                                         "offsets": [{"topic": f"{gid}-topic", "partition": p,
                                                      "offset": 1000 * r + p, "leader_epoch": 3} for p in parts]})
                             + "\n")
                    n_events += 1
                    n_commit_partitions += partitions_per_member
                    ts += 1
    return {"events": n_events, "commit_partitions": n_commit_partitions, "groups": groups,
            "members": groups * members, "held_partitions": groups * members * partitions_per_member}


def write_churn_trace(path: Path, *, groups: int = 1000, members: int = 6, partitions: int = 24, rounds: int = 15,
                      reassign_every: int = 3, seed: int = 1) -> dict:
    """A churn-heavy trace: every ``reassign_every`` commits of a group on average, the group
    rebalances (its epoch moves and every member's partitions rotate), and a member's next
    commit often still carries its old epoch and old partitions (stale epochs, zombie commits,
    avoidable fencing), answered by the broker as a strict broker would. Judgement caches and
    the member-alone fast path rarely hold here: this is the slow path's benchmark."""
    rnd = random.Random(seed)
    n_events = n_commit_partitions = 0
    ts = 1_700_000_000_000

    def write(record: dict) -> None:
        nonlocal n_events, ts
        record["ts"] = ts
        fh.write(json.dumps(record) + "\n")
        n_events += 1
        ts += 1

    def assign(gid: str, epoch: int, shift: int) -> dict[str, list[int]]:
        held = {f"{gid}-member-{m}": [] for m in range(members)}
        for p in range(partitions):
            held[f"{gid}-member-{(p + shift) % members}"].append(p)
        for mid, parts in held.items():
            write({"type": "member_assignment", "group_id": gid, "member_id": mid, "protocol": "consumer",
                   "member_epoch": epoch, "state": "STABLE", "assigned": [{"topic": f"{gid}-topic",
                                                                           "partitions": parts}],
                   "pending_revocation": []})
        return held

    with open(path, "w") as fh:
        state = {}  # gid -> (epoch, held now, held before the last rebalance)
        for g in range(groups):
            gid = f"group-{g:04d}"
            held = assign(gid, 1, 0)
            state[gid] = (1, held, held)
        for r in range(rounds):
            for g in range(groups):
                gid = f"group-{g:04d}"
                for m in range(members):
                    epoch, held, before = state[gid]
                    if rnd.random() < 1 / reassign_every:
                        epoch += 1
                        before, held = held, assign(gid, epoch, rnd.randrange(1, members))
                        state[gid] = (epoch, held, before)
                    mid = f"{gid}-member-{m}"
                    stale = epoch > 1 and rnd.random() < 0.4  # a commit in flight across the rebalance
                    c, parts = (epoch - 1, before[mid]) if stale else (epoch, held[mid])
                    write({"type": "offset_commit", "group_id": gid, "member_id": mid, "member_epoch": c,
                           "error_code": 0 if c == epoch else 113,
                           "offsets": [{"topic": f"{gid}-topic", "partition": p, "offset": 1000 * r + p,
                                        "leader_epoch": 3} for p in parts]})
                    n_commit_partitions += len(parts)
    return {"events": n_events, "commit_partitions": n_commit_partitions, "groups": groups,
            "members": groups * members, "held_partitions": groups * partitions}


# --------------------------------------------------------------------------- groups that come and go

EPHEMERAL_ENDS = ("deleted", "expired", "dead", "idle")
"""How an ephemeral group ends (``ephemeral_group``), in turn: its member leaves and its offsets
are deleted (``offset_deleted``, as ``__consumer_offsets`` shows), or left to expire; the
coordinator deletes it (``Dead``); or its member crashes unseen and nothing mentions it again."""


def ephemeral_group(n: int, ts: int, *, topics: int = 3, partitions: int = 3) -> list[dict]:
    """One short-lived group, ``console-consumer-<n>``, from ``ts``: a member joins, commits twice
    and ends the way ``EPHEMERAL_ENDS[n % 4]`` says (contract §4.4 forgets it each way)."""
    gid, mid, topic = f"console-consumer-{n:06d}", f"m-{n:06d}", f"topic-{n % topics}"
    parts = list(range(partitions))
    events = [{"type": "member_assignment", "ts": ts, "group_id": gid, "member_id": mid, "protocol": "consumer",
               "member_epoch": 1, "state": "STABLE", "assigned": [{"topic": topic, "partitions": parts}],
               "pending_revocation": [], "subscribed_topics": [topic]}]
    for i in (1, 2):
        events.append({"type": "offset_commit", "ts": ts + i, "group_id": gid, "member_id": mid, "member_epoch": 1,
                       "error_code": 0, "offsets": [{"topic": topic, "partition": p, "offset": 100 * i + p,
                                                     "leader_epoch": 0} for p in parts]})
    end = EPHEMERAL_ENDS[n % len(EPHEMERAL_ENDS)]
    if end != "idle":
        events.append({"type": "member_left", "ts": ts + 3, "group_id": gid, "member_id": mid, "reason": "leave"})
    if end in ("deleted", "dead"):
        events += [{"type": "offset_deleted", "ts": ts + 4, "group_id": gid, "topic": topic, "partition": p}
                   for p in parts]
    if end == "dead":
        events.append({"type": "group_state", "ts": ts + 5, "group_id": gid, "state": "Dead", "protocol": "consumer"})
    return events


def long_lived_commits(groups: int, ts: int, *, topics: int = 3, partitions: int = 3, join: bool = False) -> list[dict]:
    """One commit of each of ``groups`` long-lived groups (``steady-<k>``) at ``ts`` (with their
    members' assignments first when ``join``): what keeps them, and the topics, mentioned."""
    events = []
    for k in range(groups):
        gid, mid, topic = f"steady-{k:03d}", f"steady-{k:03d}-m", f"topic-{k % topics}"
        parts = list(range(partitions))
        if join:
            events.append({"type": "member_assignment", "ts": ts, "group_id": gid, "member_id": mid,
                           "protocol": "consumer", "member_epoch": 1, "state": "STABLE",
                           "assigned": [{"topic": topic, "partitions": parts}], "pending_revocation": [],
                           "subscribed_topics": [topic]})
        events.append({"type": "offset_commit", "ts": ts + 1, "group_id": gid, "member_id": mid, "member_epoch": 1,
                       "error_code": 0, "offsets": [{"topic": topic, "partition": p, "offset": ts % 1_000_000 + p,
                                                     "leader_epoch": 0} for p in parts]})
    return events


def write_ephemeral_trace(path: Path, *, groups: int = 1000, seed: int = 1, **_) -> dict:
    """``groups`` ephemeral groups, 10 ms apart, among 3 long-lived ones committing every second."""
    ts0 = 1_700_000_000_000
    events = long_lived_commits(3, ts0, join=True)
    for n in range(groups):
        events += ephemeral_group(n, ts0 + 1_000 + 10 * n)
        if n % 100 == 0:
            events += long_lived_commits(3, ts0 + 1_000 + 10 * n + 6)
    events.sort(key=lambda e: e["ts"])
    with open(path, "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in events)
    return {"events": len(events), "groups": groups}


TRACES = {"benchmark": write_trace, "churn": write_churn_trace, "ephemeral": write_ephemeral_trace}
"""Traces by name (``bench/ab_replay.py --trace``)."""
