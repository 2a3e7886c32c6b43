"""``streaming.cluster``: where it comes from (flag > environment > file > default), what it
labels (the events the job decodes itself: request-log lines, ``__consumer_offsets`` records,
and so their verdicts and alerts) and what it leaves alone (a contract event's own field)."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block
from fencewatch.streaming.config.settings import ConfigError, job_cluster, load_config
from fencewatch.streaming.runtime.replay import judge_events
from fencewatch.streaming.runtime.request_log_input import make_request_log_mapper
from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from bridge_encoder import encode_record  # noqa: E402
from test_request_log_judged import ORDERS, scenario  # noqa: E402


@pytest.mark.parametrize("file, env, flag, expected", [
    (None, None, None, "default"),
    ("eu-1", None, None, "eu-1"),
    ("eu-1", "us-2", None, "us-2"),
    ("eu-1", "us-2", "ap-3", "ap-3"),
    (None, None, "ap-3", "ap-3"),
], ids=["default", "file", "env-over-file", "flag-over-env", "flag-alone"])
def test_cluster_precedence_flag_env_file_default(tmp_path, file, env, flag, expected):
    path = tmp_path / "c.yaml"
    path.write_text(f"streaming:\n  cluster: {file}\n" if file else "{}\n")
    cfg = load_config(file=path, environ={"FENCEWATCH_STREAMING__CLUSTER": env} if env else {},
                      overrides={"streaming": {"cluster": flag}} if flag else None)
    assert cfg.streaming.cluster == expected
    assert job_cluster(cfg.streaming) == (None if expected == "default" else expected)


def test_an_empty_cluster_is_refused():
    with pytest.raises(ConfigError, match="streaming.cluster must not be empty"):
        load_config(environ={"FENCEWATCH_STREAMING__CLUSTER": " "})


def _request_log_events(cluster):
    lines = scenario()
    frame = pd.DataFrame({"value": [x.encode() for x in lines], "topic": "rl", "partition": 0,
                          "offset": range(len(lines)), "record_ts": 5})
    (out,) = list(make_request_log_mapper({ORDERS: "orders"}, cluster=cluster)(iter([frame])))
    return [json.loads(v) for v in out["value"]]


@pytest.mark.parametrize("setting", ["eu-1", "default"])
def test_request_log_events_their_verdicts_and_alerts_carry_the_jobs_cluster(setting):
    cfg = load_config(environ={"FENCEWATCH_STREAMING__CLUSTER": setting})
    events = _request_log_events(job_cluster(cfg.streaming))
    result = judge_events(events)
    assert not result.errors, result.errors
    verdicts = [json.loads(x) for cv in result.commit_verdicts for x in commit_verdicts_block(cv).split("\n")]
    alerts = [json.loads(alert_json(a)) for a in result.alert_records]
    assert verdicts and {v["cluster"] for v in verdicts} == {setting}
    assert {a["cluster"] for a in alerts} <= {setting}
    if setting == "default":  # the field left out, as before the setting: the same records as 0.x
        assert all("cluster" not in e for e in events)


def test_consumer_offsets_records_carry_the_jobs_cluster():
    key, value = encode_record(1, {"group": "g", "topic": "orders", "partition": 0}, 3,
                               {"offset": 42, "leaderEpoch": 4, "metadata": "", "commitTimestamp": 5})
    frame = pd.DataFrame({"key": [key], "value": [value], "topic": "__consumer_offsets", "partition": 0,
                          "offset": [7], "record_ts": 5})
    (out,) = list(make_bridge_mapper({}, cluster="eu-1")(iter([frame])))
    events = [json.loads(v) for v in out["value"]]
    assert events and {e["cluster"] for e in events} == {"eu-1"}


def test_a_contract_events_own_cluster_is_kept_and_absent_means_default():
    """The job's setting does not relabel contract events (one events topic may carry several
    clusters', each bridge naming its own): the replay engine judges them as the job does."""
    base = {"type": "group_state", "ts": 1, "group_id": "g", "state": "Stable", "protocol": "consumer"}
    result = judge_events([{**base, "cluster": "us-2", "event_id": "a"}, {**base, "event_id": "b"}])
    assert not result.errors
    assert {(g.cluster, g.group_id) for g in result.groups} == {("us-2", "g"), ("default", "g")}


@pytest.mark.parametrize("source, cluster, said", [
    ("consumer-offsets", "eu-1", " as cluster 'eu-1'"),
    ("events,request-log", "default", " as cluster 'default'"),
    ("events", "default", ""),
    ("events", "eu-1", "unused"),
])
def test_the_startup_line_says_which_cluster_the_job_names(source, cluster, said):
    from fencewatch.streaming.config.settings import StreamingConfig
    from fencewatch.streaming.runtime.query import cluster_note

    note = cluster_note(StreamingConfig(source=source, cluster=cluster))
    assert (said in note) if said else note == ""
