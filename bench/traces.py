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
