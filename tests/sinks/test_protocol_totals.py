"""``MetricsSink.protocol_totals``: the demo's streams-groups row, from what the exporter counted
(streams groups of the simulator's streams profile, judged by the local engine, beside a consumer
group's verdicts that must not count)."""
from __future__ import annotations

import collections
import dataclasses

from fencewatch.sim.profiles import profile
from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.streaming.commands.demo import streams_line
from fencewatch.streaming.runtime.replay import judge_events


def test_streams_groups_verdicts_and_alerts_counted_apart_from_consumer_groups():
    streams = simulate(SimConfig(knobs=dataclasses.replace(profile("streams"), groups=2), seed=1,
                                 duration_ms=600_000))
    consumer = simulate(SimConfig(knobs=dataclasses.replace(profile("zombie-storm"), groups=1), seed=1,
                                  duration_ms=600_000, event_id_prefix="c-"))
    consumer = [dict(e, group_id="orders") if "group_id" in e else e for e in consumer]
    sink = MetricsSink(MetricsConfig(max_groups=10))
    for batch_id, events in enumerate((streams, consumer)):
        r = judge_events(events)
        groups = sorted({e["group_id"] for e in events if "group_id" in e})
        protocol = "streams" if events is streams else "consumer"
        sink.add_batch(batch_id=batch_id, verdicts=r.verdicts, alerts=r.alerts,
                       group_status=[{"cluster": "default", "group_id": g, "protocol": protocol, "state": "Stable"}
                                     for g in groups])
        if events is streams:
            expected = (collections.Counter(v["class"] for v in r.verdicts),
                        collections.Counter(a["kind"] for a in r.alerts))
    sink.render()  # a scrape: series of groups promoted out of "other" are exposed, their counts released
    totals = sink.protocol_totals("streams")
    assert totals["groups"] == 2 and totals["folded"] == 0
    assert totals["classes"] == dict(expected[0]) and totals["alerts"] == dict(expected[1])
    assert "avoidable" in totals["classes"] and "ZOMBIE_COMMIT" in totals["alerts"]
    line = streams_line(totals)
    assert line.startswith(f"2 groups, {sum(expected[0].values()):,} verdicts (accepted ")
    assert streams_line(sink.protocol_totals("classic")) is None
