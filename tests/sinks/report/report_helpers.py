"""Helpers of the report's tests: the ``fencewatch`` command, the simulated trace's options."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FENCEWATCH = str(Path(sys.executable).with_name("fencewatch"))
# Six groups for 20 simulated minutes; 40% of them stop after 4 min and lose their offsets (6 min
# retention): fences, avoidable and aborted transactions, zombies, truncations and expiry alike.
SIMULATE = ["--profile", "mixed", "--duration", "20m", "--groups", "6", "--seed", "0",
            "--set", "empty_fraction=0.4", "--set", "empty_after_ms=240000", "--set", "retention_minutes=6",
            "--set", "retention_check_interval_ms=60000"]
RULES = ["--retention", "6m", "--retention-check-interval", "1m"]


def fencewatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([FENCEWATCH, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# Verdict records for hand-checked tests, as sinks/jsonl.py writes them.
T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z
S, I, U, N = "STALE_MEMBER_EPOCH", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "NONE"


def verdict(event_id, ts, group, member, kind, partition, answers, cls, *, unsafe=False, broker_error=None,
            agrees=None, warming=False, cluster="default"):
    strict, mr, ae, kip = answers
    return {"event_id": event_id, "ts": ts, "cluster": cluster, "group_id": group, "member_id": member,
            "kind": kind, "client_epoch": 3, "broker_epoch": 4, "topic": "t", "partition": partition,
            "assignment_epoch": 3, "revocation_epoch": 0, "strict": strict, "member_revocation": mr,
            "assignment_epoch_check": ae, "kip1251": kip, "class": cls, "unsafe": unsafe, "owner_member_id": None,
            "broker_error": broker_error, "model_agrees": agrees, "warming_up": warming}
