"""What the groups' steps bring the exporter (``sinks.metrics_batch.StepCounts``): the state
function's status and counts rows gathered as the driver reads them, handed to the exporter as its
batch fields, so the driver names none of the metrics they feed (issue 47 item 4). Real groups,
real statuses (``state.status.step_status``), the real exporter."""
from collections import Counter

from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.metrics_batch import StepCounts
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import Heartbeat, MemberAssignment
from fencewatch.state.model import KafkaError, MemberState, Protocol
from fencewatch.state.status import event_counts, step_status

CFG = RulesConfig()
BUILD = {"version": "x", "python_version": "y", "pyspark_version": "z"}


def _group(group_id: str, fenced: int, *, epochs: int = 1):
    g = grp.new_group("default", group_id)
    out = grp.Outputs()
    for e in range(1, epochs + 1):
        g = grp.process(g, MemberAssignment(ts=1000 + e, cluster="default", group_id=group_id, event_id=f"a{e}",
                                            seq=e, member_id="A", protocol=Protocol.CONSUMER, member_epoch=e,
                                            assigned=(("t", 0),), pending_revocation=(), group_epoch=e,
                                            state=MemberState.STABLE), CFG, out)
    step = grp.Outputs()  # the step whose status is shipped: its heartbeats only
    for i in range(fenced):
        g = grp.process(g, Heartbeat(2000 + i, "default", group_id, f"h{i}", 100 + i, "A", 1, 1,
                                     KafkaError.FENCED_MEMBER_EPOCH.code), CFG, step)
    return g, step


def _status(group_id: str, fenced: int, events: dict, **kw):
    g, step = _group(group_id, fenced, **kw)
    return step_status(g, CFG, Counter(events), step.heartbeat_errors)


def test_a_batchs_rows_become_the_exporters_fields_in_the_order_they_came():
    steps = StepCounts()
    summary = (Counter({"shape": 2}), Counter())
    steps.add_status_row([_status("g1", 2, {("heartbeat", "heartbeats"): 2}),
                          _status("g2", 0, {("offset_commit", "offsets"): 3})], summary)
    steps.add_counts_row("default", event_counts(Counter({("partition_epochs", "offsets"): 4})))
    steps.add_status_row([_status("g1", 1, {("heartbeat", "heartbeats"): 1})], None)
    fields = steps.fields()
    assert list(fields["events"].items()) == [(("default", "g1", "heartbeat", "heartbeats"), 3),
                                              (("default", "g2", "offset_commit", "offsets"), 3),
                                              (("default", "", "partition_epochs", "offsets"), 4)]
    # a step's errors that grew, not the group's totals; a group without any counts none
    assert fields["heartbeat_errors"] == {("default", "g1", "FENCED_MEMBER_EPOCH"): 3}
    assert fields["verdict_summaries"] == [summary]
    assert [s["group_id"] for s in fields["group_status"]] == ["g1", "g2", "g1"]
    assert all("events" not in s and "heartbeat_errors" not in s for s in fields["group_status"])
    assert steps.events_read() == 10
    assert StepCounts().fields() == {"verdict_summaries": [], "group_status": [], "events": {},
                                     "heartbeat_errors": {}}


def _sample(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_the_exporter_counts_what_the_steps_brought_without_the_driver_naming_a_metric():
    sink = MetricsSink(MetricsConfig(max_groups=10), clock=lambda: 4_000_000_000.0, build_labels=BUILD)
    steps = StepCounts()
    steps.add_status_row([_status("g1", 2, {("heartbeat", "heartbeats"): 2}, epochs=3)], None)
    steps.add_counts_row("default", event_counts(Counter({("unknown", "offsets"): 1})))
    assert sink.add_batch(batch_id=0, **steps.fields())
    text = sink.render()
    assert _sample(text, 'fencewatch_broker_errors_total{api="ConsumerGroupHeartbeat"') == [
        'fencewatch_broker_errors_total{api="ConsumerGroupHeartbeat",cluster="default",error="FENCED_MEMBER_EPOCH",'
        'group="g1"} 2.0']
    assert 'fencewatch_events_total{cluster="default",group="g1",source="heartbeats",type="heartbeat"} 2.0' in text
    assert 'fencewatch_events_total{cluster="default",group="",source="offsets",type="unknown"} 1.0' in text
    assert 'fencewatch_group_rebalances_total{cluster="default",group="g1"} 3.0' in text
    # the next batch: the step's growth only, and the rebalances the status's total grew by
    steps = StepCounts()
    steps.add_status_row([_status("g1", 1, {}, epochs=4)], None)
    sink.add_batch(batch_id=1, **steps.fields())
    text = sink.render()
    assert ('fencewatch_broker_errors_total{api="ConsumerGroupHeartbeat",cluster="default",error="FENCED_MEMBER_EPOCH",'
            'group="g1"} 3.0') in text
    assert 'fencewatch_group_rebalances_total{cluster="default",group="g1"} 4.0' in text


def test_the_runtime_names_no_metric_nor_a_steps_count():
    """The Spark glue hands rows over; the metrics (``sinks.metrics``) and what a step counts
    (``state.status``) are named where they are declared. Any string in ``streaming/runtime/`` that
    is a job metric's name, a step count's field or a heartbeat error it counts fails here (the
    state function and the writer named three of them before issue 47 item 4)."""
    import ast
    from pathlib import Path

    from fencewatch.sinks import metrics as m
    from fencewatch.state.status import HEARTBEAT_ERRORS

    named = {s.name for s in m.JOB_METRICS} | {"heartbeat_errors", "rebalances_total", *HEARTBEAT_ERRORS}
    runtime = Path(__file__).resolve().parents[2] / "streaming" / "runtime"
    found = [f"{p.name}:{node.lineno} {node.value!r}" for p in sorted(runtime.glob("*.py"))
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in named]
    assert found == []
