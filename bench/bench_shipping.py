"""Request-log shipping benchmark: lines/s through the shipped rsyslog configuration.

Starts Apache Kafka's broker (``FENCEWATCH_BENCH_BROKER``: a version or ``tansu``; or ``--bootstrap``) and Debian's rsyslogd on
``deploy/request-log/rsyslog-fencewatch.conf`` unchanged (its environment variables
only), appends N request-log lines to a file in one go (half ConsumerGroupHeartbeat
~0.8 KB, half OffsetCommit of 10 partitions ~2.1 KB, one in 1,000 a 1,000-partition
commit ~130 KB), and times from the first write until the last record is readable on
the lines topic. Says whether a shipper keeps up with a cluster's commit and heartbeat
rate (docs/real-cluster.md, "Volume and broker cost"); it does not measure the
brokers' cost of rendering the log, which needs a real broker (UNVERIFIED there).

Environment fact (tests/deploy/rsyslog_shipper.py): Debian's librdkafka 2.0.2 cannot
talk to Tansu, so omkafka runs on the librdkafka of confluent-kafka's wheel.

    python bench/bench_shipping.py [--lines 50000] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "request-log" / "rsyslog-fencewatch.conf"


def line(i: int) -> str:
    """A `Completed request:` line shaped as Kafka writes it (RequestConvertToJson)."""
    if i % 1000 == 999:
        kind, partitions = "commit", 1000
    else:
        kind, partitions = ("heartbeat", 0) if i % 2 else ("commit", 10)
    header = {"requestApiKey": 68 if kind == "heartbeat" else 8, "requestApiVersion": 1 if kind == "heartbeat" else 9,
              "correlationId": i, "clientId": f"consumer-{i % 500}",
              "requestApiKeyName": "CONSUMER_GROUP_HEARTBEAT" if kind == "heartbeat" else "OFFSET_COMMIT"}
    if kind == "heartbeat":
        request = {"groupId": f"g{i % 50}", "memberId": f"m-{i % 500}", "memberEpoch": 7, "instanceId": None,
                   "rackId": None, "rebalanceTimeoutMs": -1, "subscribedTopicNames": None, "subscribedTopicRegex": None,
                   "serverAssignor": None, "topicPartitions": None}
        response = {"throttleTimeMs": 0, "errorCode": 0, "errorMessage": None, "memberId": f"m-{i % 500}",
                    "memberEpoch": 7, "heartbeatIntervalMs": 5000, "assignment": None}
    else:
        request = {"groupId": f"g{i % 50}", "generationIdOrMemberEpoch": 7, "memberId": f"m-{i % 500}",
                   "groupInstanceId": None, "topics": [{"name": "orders", "partitions": [
                       {"partitionIndex": p, "committedOffset": 1000 * i + p, "committedLeaderEpoch": 4,
                        "committedMetadata": ""} for p in range(partitions)]}]}
        response = {"throttleTimeMs": 0, "topics": [{"name": "orders", "partitions": [
            {"partitionIndex": p, "errorCode": 0} for p in range(partitions)]}]}
    body = {"isForwarded": False, "requestHeader": header, "request": request, "response": response,
            "connection": f"10.0.0.5:9092-10.0.1.{i % 200}:5{i % 1000:04d}-1-{i}", "totalTimeMs": 0.8,
            "requestQueueTimeMs": 0.1, "localTimeMs": 0.5, "remoteTimeMs": 0.0, "throttleTimeMs": 0,
            "responseQueueTimeMs": 0.05, "sendTimeMs": 0.1, "securityProtocol": "PLAINTEXT",
            "principal": "User:ANONYMOUS", "listener": "PLAINTEXT",
            "clientInformation": {"softwareName": "apache-kafka-java", "softwareVersion": "4.1.0"}}
    return f"[2026-11-23 10:15:02,481] DEBUG Completed request:{json.dumps(body, separators=(',', ':'))} (kafka.request.logger)"


def bundled_librdkafka(workdir: Path) -> Path:
    import confluent_kafka

    libs = sorted(Path(confluent_kafka.__file__).resolve().parents[1].glob("confluent_kafka.libs/librdkafka*.so*"))
    libdir = workdir / "lib"
    libdir.mkdir(exist_ok=True)
    (libdir / "librdkafka.so.1").symlink_to(libs[0])
    return libdir


def count_records(bootstrap: str, topic: str, expected: int, deadline: float) -> tuple[int, float]:
    """Read the topic until `expected` records arrived; returns (records, time of the last one)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.message.max.bytes": 16 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen, last = 0, time.perf_counter()
    try:
        while seen < expected and time.perf_counter() < deadline:
            batch = consumer.consume(10_000, 0.5)
            good = sum(1 for m in batch if m.error() is None)
            if good:
                seen += good
                last = time.perf_counter()
    finally:
        consumer.close()
    return seen, last


def run(bootstrap: str, lines: int) -> str:
    from fencewatch.streaming.brokers.common import create_topics

    rsyslogd = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    topic = f"fencewatch.request-log-bench-{uuid.uuid4().hex[:8]}"
    create_topics({"bootstrap.servers": bootstrap}, [topic], 1, topic_config={"max.message.bytes": "8388608"})
    with tempfile.TemporaryDirectory(prefix="fw-ship-") as tmp:
        work = Path(tmp)
        (work / "state").mkdir()
        log = work / "kafka-request.log"
        log.touch()
        env = {**os.environ, "FENCEWATCH_BROKER_ID": "1", "FENCEWATCH_REQUEST_LOG": str(log),
               "FENCEWATCH_BOOTSTRAP_SERVERS": bootstrap, "FENCEWATCH_REQUEST_LOG_TOPIC": topic,
               "FENCEWATCH_RSYSLOG_WORKDIR": str(work / "state"), "LD_LIBRARY_PATH": str(bundled_librdkafka(work))}
        proc = subprocess.Popen([rsyslogd, "-n", "-f", str(CONFIG), "-i", str(work / "pid")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            while not (work / "pid").exists():
                if proc.poll() is not None:
                    raise SystemExit(f"rsyslogd exited with {proc.returncode}")
                time.sleep(0.05)
            text = "".join(line(i) + "\n" for i in range(lines))
            started = time.perf_counter()
            with open(log, "a") as f:
                f.write(text)
            seen, last = count_records(bootstrap, topic, lines, started + 600)
        finally:
            proc.terminate()
            proc.wait(30)
    seconds = last - started
    size = len(text.encode())
    return (f"lines: {lines:,} ({size / 1e6:.1f} MB, {size / lines:,.0f} bytes/line on average; 1 in 1,000 a "
            f"1,000-partition commit)\n"
            f"arrived on the topic: {seen:,}{'' if seen == lines else '  <-- INCOMPLETE'}\n"
            f"rsyslog imfile -> omkafka (zstd, acks=all) -> broker  {seen / seconds:>10,.0f} lines/s  "
            f"{size / seconds / 1e6:>6.1f} MB/s  ({seconds:.1f} s)\n"
            f"load average at the end: {os.getloadavg()[0]:.2f} (the machine is shared; wall-clock numbers)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--bootstrap", help="an existing broker instead of the embedded one")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if not shutil.which("rsyslogd") and not os.path.exists("/usr/sbin/rsyslogd"):
        print("skipped: rsyslogd not installed (make system-deps installs rsyslog-kafka)")
        return 0
    sys.path.insert(0, str(ROOT))
    if args.bootstrap:
        body = run(args.bootstrap, args.lines)
    else:
        from fencewatch.streaming.brokers import embedded_broker

        with embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka")) as broker:
            body = run(broker.bootstrap, args.lines)
    print(body)
    if args.write_docs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("request-log shipping (rsyslog)", f"python bench/bench_shipping.py --lines {args.lines}",
                      f"```\n{body}\n```\n\nThe brokers' own cost of writing the log is not measured here "
                      "(docs/real-cluster.md says how to measure it in staging).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
