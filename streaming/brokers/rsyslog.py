"""The shipped rsyslog configuration (deploy/request-log/rsyslog-fencewatch.conf) run as a child:
the real-cluster path's log shipper for the tests and benchmarks.

``start_rsyslog_shipper(bootstrap, topic, request_log, workdir)``
runs Debian's ``rsyslogd -n`` (package ``rsyslog-kafka``: ``imfile`` -> ``omkafka``) on the
shipped file unchanged; only the environment variables the file reads are set (log path,
bootstrap, topic, broker id, state directory). ``read_lines`` reads the topic back.

One environment fact, not a change to the pipeline: Debian 12's librdkafka (2.0.2) cannot
parse the embedded Tansu broker's ApiVersions v3 answer ("Read underflow ... expected
216172782113783806 bytes", checked with kcat), while newer librdkafka can. So rsyslog's
omkafka runs here against the librdkafka that confluent-kafka's wheel bundles (same ABI,
soname librdkafka.so.1) through LD_LIBRARY_PATH. Apache Kafka brokers speak to 2.0.2 fine.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from fencewatch.streaming.brokers.common import _parent_death_preexec

#: The shipped configuration, from a checkout (deploy/ is not in the wheel).
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "request-log" / "rsyslog-fencewatch.conf"
#: Seconds to wait for rsyslog to write its pid file: an upper bound, not a speed check.
START_PATIENCE_S = 20.0
#: Seconds to wait for shipped records to arrive: an upper bound, not a speed check.
ARRIVAL_PATIENCE_S = 60.0


def rsyslogd() -> str:
    path = shutil.which("rsyslogd") or ("/usr/sbin/rsyslogd" if os.path.exists("/usr/sbin/rsyslogd") else None)
    assert path, "rsyslogd not found: install Debian's rsyslog-kafka package (`make system-deps`)"
    assert glob.glob("/usr/lib/*/rsyslog/omkafka.so") or glob.glob("/usr/lib/rsyslog/omkafka.so"), (
        "rsyslog's omkafka module is missing: install Debian's rsyslog-kafka package (`make system-deps`)")
    return path


def _bundled_librdkafka_dir(workdir: Path) -> Path:
    """A directory holding ``librdkafka.so.1`` -> confluent-kafka's bundled librdkafka (see module doc)."""
    import confluent_kafka

    site = Path(confluent_kafka.__file__).resolve().parents[1]
    libs = sorted(site.glob("confluent_kafka.libs/librdkafka*.so*"))
    assert libs, f"no bundled librdkafka next to {confluent_kafka.__file__}"
    libdir = workdir / "lib"
    libdir.mkdir(parents=True, exist_ok=True)
    link = libdir / "librdkafka.so.1"
    if not link.exists():
        link.symlink_to(libs[0])
    return libdir


@dataclass
class RsyslogShipper:
    """A running rsyslogd on the shipped configuration."""

    process: subprocess.Popen
    request_log: Path
    workdir: Path
    topic: str
    broker_id: str
    output: Path

    def stop(self) -> None:
        """SIGTERM, then wait: rsyslog flushes omkafka's queue and saves its file position."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_text(self) -> str:
        """rsyslogd's console output and its own messages (the config writes them to rsyslogd.log)."""
        paths = (self.output, self.workdir / "state" / "rsyslogd.log")
        return "".join(p.read_text(errors="replace") for p in paths if p.exists())


def start_rsyslog_shipper(bootstrap: str, topic: str, request_log: Path, workdir: Path, *,
                          broker_id: str = "1", config: Path = SHIPPED_CONFIG) -> RsyslogShipper:
    """Run ``rsyslogd -n -f config`` tailing ``request_log`` into ``topic``; returns once it runs."""
    workdir.mkdir(parents=True, exist_ok=True)
    state = workdir / "state"
    state.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "FENCEWATCH_BROKER_ID": broker_id,
        "FENCEWATCH_REQUEST_LOG": str(request_log),
        "FENCEWATCH_BOOTSTRAP_SERVERS": bootstrap,
        "FENCEWATCH_REQUEST_LOG_TOPIC": topic,
        "FENCEWATCH_RSYSLOG_WORKDIR": str(state),
        "LD_LIBRARY_PATH": str(_bundled_librdkafka_dir(workdir)),
    }
    pidfile = workdir / "rsyslogd.pid"
    pidfile.unlink(missing_ok=True)
    output = workdir / "rsyslogd.out"
    with open(output, "ab") as out:
        process = subprocess.Popen(
            [rsyslogd(), "-n", "-f", str(config), "-i", str(pidfile)],
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_parent_death_preexec,
        )
    shipper = RsyslogShipper(process, request_log, workdir, topic, broker_id, output)
    deadline = time.monotonic() + START_PATIENCE_S
    while not pidfile.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            shipper.stop()
            raise RuntimeError(f"rsyslogd did not start (exit {process.returncode}):\n{shipper.log_text()[-3000:]}")
        time.sleep(0.05)
    return shipper


def read_lines(bootstrap: str, topic: str, expected: int, *, patience_s: float = ARRIVAL_PATIENCE_S,
               settle_s: float = 2.0) -> list:
    """Every record of ``topic`` (all partitions, from the beginning) once ``expected`` arrived,
    plus whatever else comes within ``settle_s`` (so duplicates show)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fencewatch-rsyslog-test",
                         "enable.auto.commit": False, "fetch.message.max.bytes": 16 * 1024 * 1024})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        records: list = []
        deadline = time.monotonic() + patience_s
        settle_until = None
        while True:
            now = time.monotonic()
            if len(records) >= expected and settle_until is None:
                settle_until = now + settle_s
            if (settle_until is not None and now > settle_until) or now > deadline:
                return records
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                records.append(msg)
    finally:
        consumer.close()
