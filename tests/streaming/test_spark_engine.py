"""``replay --engine spark`` against ``--engine local`` on simulator traces of every profile.

One combined trace (each profile under its own cluster name, so their groups never
mix) keeps this to a single Spark job; both engines must write the same bytes.
"""
import json
from dataclasses import replace

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import PROFILES, profile
from fencewatch.state.config import RulesConfig
from fencewatch.streaming.runtime.replay import replay_file, write_alerts, write_verdicts
from fencewatch.streaming.runtime.spark_replay import replay_file_spark

pytestmark = pytest.mark.spark

REQUIRED = ("steady", "rolling-restart", "zombie-storm", "eos-heavy", "expiry-hazard", "unclean-election", "mixed",
            "ephemeral")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    assert set(REQUIRED) <= set(PROFILES)
    lines = []
    for name in REQUIRED:
        knobs = replace(profile(name), groups=min(profile(name).groups, 4))
        if name == "ephemeral":  # groups deleted (Dead) and forgotten within the trace's 1,500 events
            knobs = replace(knobs, ephemeral_life_ms=5_000, retention_minutes=1, retention_check_interval_ms=10_000)
        cfg = SimConfig(knobs=knobs, seed=7, duration_ms=None, max_events=1500, cluster=name,
                        event_id_prefix=f"{name}-")
        lines += [json.dumps(e) for e in simulate(cfg)]
    lines.insert(10, "{broken json")
    lines.insert(20, json.dumps({"type": "offset_commit", "ts": "later"}))
    lines.insert(30, json.dumps({"type": "brand_new_type", "ts": 1}))
    path = tmp_path_factory.mktemp("trace") / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def local_bytes(path, cfg):
    import io

    res = replay_file(str(path), cfg)
    v, a = io.BytesIO(), io.BytesIO()
    write_verdicts(res.commit_verdicts, v)
    write_alerts(res.alert_records, a)
    return v.getvalue().decode(), a.getvalue().decode(), res


def test_spark_replay_is_byte_identical_to_local(spark, trace):
    cfg = RulesConfig(warmup_ms=0, expiry_warning_ms=600_000)
    verdicts, alerts, res = local_bytes(trace, cfg)
    sres = replay_file_spark(str(trace), cfg, spark=spark)
    spark_verdicts = "".join(line + "\n" for line in sres.verdict_lines)
    spark_alerts = "".join(line + "\n" for line in sres.alert_lines)
    assert spark_verdicts == verdicts
    assert spark_alerts == alerts
    # Not vacuous: every profile produced verdicts, and the interesting classes and alerts occur.
    clusters = {json.loads(line)["cluster"] for line in verdicts.splitlines()}
    assert clusters == set(REQUIRED)
    classes = {json.loads(line)["class"] for line in verdicts.splitlines()}
    assert {"accepted", "avoidable", "zombie"} <= classes
    kinds = {json.loads(line)["kind"] for line in alerts.splitlines()}
    assert {"ZOMBIE_COMMIT", "AVOIDABLE_FENCING"} <= kinds
    # Bad lines are reported by both engines, with the same coordinates.
    assert sorted(e.coords for e in sres.errors) == sorted(e.coords for e in res.errors) == ["line 11", "line 21"]
    assert sres.unknown_types == res.unknown_types == {"brand_new_type": 1}
