"""What each stage of the streaming job costs: the query cut after each stage, same events, same session.

Variants, each reading the same backlog from the embedded broker in micro-batches of
``--per-trigger`` records on ``local[2]``:

- ``source``: the job's inputs (``inputs.build_inputs``: for ``--source events`` the Kafka source
  with the router inside ``read``) into a no-op sink;
- ``state``: plus ``applyInPandasWithState`` (``query.build_outputs``), no-op sink;
- ``collect``: plus the batch writer's read of the outputs (``writer._chunks``), nothing produced;
- ``full``: the job as ``fencewatch run`` runs it (``start_query`` with the Kafka outputs).

Prints events/s, micro-batch durations and CPU microseconds per event by process kind (JVM,
Python workers, driver), with ``replay --engine local`` on the same events beside them. Not
``make bench``: a tool for finding where the time goes (docs/benchmarks.md, issue 14).

    python bench/stages_streaming.py [--events 100000] [--per-trigger 20000] [--variants source,state,collect,full]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_pipeline import _follow  # noqa: E402
from bench.bench_streaming import produce, replay_rate, simulate_lines  # noqa: E402


def run_variant(spark, broker: str, variant: str, hb: str, off: str, n: int, per_trigger: int) -> str:
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime import inputs as rt_inputs, query as rt_query, stats as rt_stats, writer as rt_writer

    checkpoint = tempfile.mkdtemp() + "/cp"
    streaming = {"bootstrap_servers": broker, "starting_offsets": "earliest", "heartbeats_topic": hb,
                 "offsets_topic": off, "checkpoint_location": checkpoint, "max_offsets_per_trigger": per_trigger}
    cfg = cfgmod.load_config(environ={}, overrides={"streaming": streaming,
                                                    "sinks": {"verdicts_topic": "fencewatch.verdicts"}})
    if variant == "full":
        kafka = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic="fencewatch.verdicts",
                             alerts_topic="fencewatch.alerts", dlq_topic="fencewatch.dlq")
        query = rt_query.start_query(spark, cfg, rt_writer.BatchWriter(cfg, kafka=kafka, stats=rt_stats.JobStats()),
                                trigger="1 second")
    else:
        df = rt_inputs.build_inputs(spark, cfg)
        if variant != "source":
            df = rt_query.build_outputs(df, cfg)
        if variant == "collect":
            def sink(d, _):
                sum(len(c) for c in rt_writer._chunks(d, 20_000))
        else:
            def sink(d, _):
                d.write.format("noop").mode("overwrite").save()
        query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="1 second").start())
    marks = _follow(query, lambda m: sum(x[1] for x in m) >= n)
    query.stop()
    data = [m for m in marks if m[1]]
    steady = data[1:]  # the first batch pays the query's start
    rows, wall = sum(m[1] for m in steady), data[-1][2] - data[0][2]
    cpu = {k: (data[-1][3][k] - data[0][3][k]) / rows * 1e6 for k in data[-1][3]}
    batches = ", ".join(f"{m[4].get('triggerExecution', 0) / 1000:.2f}" for m in steady)
    return (f"{variant:<8} {rows / wall:>8,.0f} events/s   CPU us/event {sum(cpu.values()):6.1f} = JVM "
            f"{cpu['jvm']:.1f} + Python workers {cpu['python_workers']:.1f} + driver {cpu['driver']:.1f}   "
            f"batches (s): {batches}   load {os.getloadavg()[0]:.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    ap.add_argument("--profile", default="mixed")
    ap.add_argument("--variants", default="source,state,collect,full")
    args = ap.parse_args(argv)
    from fencewatch.streaming.brokers import embedded_broker
    from fencewatch.streaming.runtime.session import checkpoint_conf, spark_session

    with embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka")) as broker:
        lines = simulate_lines(args.profile, args.events, 50)
        broker.create_topics(["hb", "off", "fencewatch.verdicts", "fencewatch.alerts", "fencewatch.dlq"],
                             partitions=4)
        produce(broker.bootstrap, lines, "hb", "off")
        r = replay_rate(lines)
        print(f"replay   {r['events_per_s']:>8,.0f} events/s   ({r['events_per_cpu_s']:,.0f} per CPU-s, one core)",
              flush=True)
        spark = spark_session("local[2]", shuffle_partitions=2, extra=checkpoint_conf(tempfile.gettempdir()))
        for variant in args.variants.split(","):
            print(run_variant(spark, broker.bootstrap, variant, "hb", "off", len(lines), args.per_trigger), flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
