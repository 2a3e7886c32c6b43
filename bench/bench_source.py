"""Kafka source benchmark: rows/s of ``fencewatch-kafka`` into a no-op sink on local[2].

Produces N small records (default 2,000,000, ~60-byte JSON values, 4
partitions) to Apache Kafka's broker (``FENCEWATCH_BENCH_BROKER``: a version or ``tansu``;
or ``--bootstrap``), then times a
Spark streaming query (``Trigger.AvailableNow``, ``foreachBatch`` writing to
Spark's ``noop`` format so every row is materialised) from start to end.
A warm-up query runs first so Python worker start-up is not counted. Also
times the bare reader (``read_partition`` in this process, no Spark) as the
ceiling the Spark path is measured against.

    python bench/bench_source.py [--records 2000000] [--partitions 4] [--write-docs]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """Batched produce of ``records`` JSON-ish values, a marker per partition; returns seconds."""
    from confluent_kafka import Producer

    from fencewatch.streaming.brokers.common import produce_marker

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    started = time.perf_counter()
    for i in range(records):
        value = b'{"type":"heartbeat","ts":%d,"group_id":"g%d","member_id":"m%d"}' % (
            1_700_000_000_000 + i, i % 100, i % 1000)
        while True:
            try:
                producer.produce(topic, value=value, key=b"g%d" % (i % 100), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("produce did not complete")
    produce_marker({"bootstrap.servers": bootstrap}, topic, range(partitions), value=b"{}")
    return time.perf_counter() - started


def spark_session(root: Path):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-source")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.warehouse.dir", str(root / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_query(spark, bootstrap: str, topic: str, checkpoint: str,
              options: dict[str, str]) -> tuple[float, int, int, float]:
    """(seconds, rows, micro-batches, seconds inside triggers) of one AvailableNow run into the noop sink."""
    from fencewatch.streaming.sources.kafka import read_kafka_stream

    def sink(df, batch_id):
        df.write.format("noop").mode("overwrite").save()

    df = read_kafka_stream(spark, bootstrap=bootstrap, topics=topic, implementation="python",
                           options={"startingOffsets": "earliest", **options})
    started = time.perf_counter()
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    progress = query.recentProgress
    for p in progress:
        logging.getLogger("bench").info("batch %s rows %s durations %s", p["batchId"], p["numInputRows"],
                                        p["durationMs"])
    rows = sum(p["numInputRows"] for p in progress)
    batches = sum(1 for p in progress if p["numInputRows"])
    in_triggers = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000.0
    return elapsed, rows, batches, in_triggers


def bare_read(bootstrap: str, topic: str) -> tuple[float, int]:
    """Read the whole topic with ``read_partition`` in this process (no Spark)."""
    from fencewatch.streaming.sources.kafka import Planner, parse_options, read_partition

    planner = Planner(parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False))
    tps, _ = planner.reader.partitions()
    parts = planner.plan(planner.resolve("earliest", "start", tps), planner.resolve("latest", "end", tps))
    started = time.perf_counter()
    rows = sum(batch.num_rows for part in parts for batch in read_partition(part))
    return time.perf_counter() - started, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None,
                    help="admission control per micro-batch (default: one batch)")
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--write-docs", action="store_true", help="write (replace) its section of docs/benchmarks.md")
    ap.add_argument("-v", "--verbose", action="store_true", help="log per-batch durations")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.verbose:
        logging.getLogger("bench").setLevel(logging.INFO)

    from fencewatch.streaming.brokers.common import ExternalBroker
    from fencewatch.streaming.brokers import embedded_broker

    started = embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka"))
    with ExternalBroker(args.bootstrap) if args.bootstrap else started as broker, tempfile.TemporaryDirectory(prefix="bench-source-") as tmp:
        root = Path(tmp)
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        warm = f"{topic}-warmup"
        broker.create_topics([topic], args.partitions)
        broker.create_topics([warm], 2)
        produce_s = produce(broker.bootstrap, topic, args.records, args.partitions)
        produce(broker.bootstrap, warm, 10_000, 2)
        bare_s, bare_rows = bare_read(broker.bootstrap, topic)

        spark = spark_session(root)
        try:
            run_query(spark, broker.bootstrap, warm, str(root / "cp-warm"), {})
            options = {}
            if args.max_offsets_per_trigger:
                options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
            query_s, rows, batches, trigger_s = run_query(spark, broker.bootstrap, topic, str(root / "cp"), options)
        finally:
            spark.stop()
        broker.delete_topics([topic, warm])

    expected = args.records + args.partitions
    if rows != expected or bare_rows != expected:
        print(f"row count mismatch: query {rows}, bare {bare_rows}, expected {expected}", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    lines = [
        f"records: {expected:,} in {args.partitions} partitions (~60-byte values), micro-batches: {batches}",
        f"{'Spark query, AvailableNow -> foreachBatch(noop), local[2]':<60}{rows / query_s:>12,.0f} rows/s"
        f"  ({query_s:.1f} s)",
        f"{'  same, time inside micro-batches only (no query start/stop)':<60}{rows / trigger_s:>12,.0f} rows/s"
        f"  ({trigger_s:.1f} s)",
        f"{'bare read_partition, one Python process, no Spark':<60}{bare_rows / bare_s:>12,.0f} rows/s"
        f"  ({bare_s:.1f} s)",
        f"{'produce to the broker (confluent-kafka, batched)':<60}{args.records / produce_s:>12,.0f} msgs/s",
        f"load average at the end: {load:.2f} (the machine is shared; wall-clock numbers)",
    ]
    print("\n".join(lines))
    if args.write_docs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        command = f"python bench/bench_source.py --records {args.records} --partitions {args.partitions}"
        if args.max_offsets_per_trigger:
            command += f" --max-offsets-per-trigger {args.max_offsets_per_trigger}"
        write_section("Kafka source, fencewatch-kafka", command, "```\n" + "\n".join(lines) + "\n```")
        print("docs/benchmarks.md updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
