"""The shipped log4j2 RequestAppender filter (deploy/request-log/log4j2-request-filter.yaml), run by
real log4j-core (the 2.x jars inside the pyspark wheel, Java 17): with kafka.request.logger at
DEBUG, kafka-request.log keeps the lines of every API the decoder reads (``DECODED_APIS``:
the commits, Consumer/StreamsGroupHeartbeat, the classic JoinGroup/LeaveGroup/SyncGroup) whole
and nothing else. The Java side only logs stdin lines; the filter is the shipped YAML."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fencewatch.streaming.ingest.request_log import DECODED_APIS

HERE = Path(__file__).resolve().parent
SNIPPET = HERE.parents[1] / "deploy" / "request-log" / "log4j2-request-filter.yaml"
STREAMS_CAPTURE = HERE.parent / "fixtures" / "kafka-streams" / "4.4.0" / "request-log.txt"


def spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def message(api_key: int, name: str, forwarded: bool = False, client_id: str = "c-1") -> str:
    """A `Completed request:` message (the part log4j's %m renders) as RequestConvertToJson writes it."""
    body = {"isForwarded": forwarded,
            "requestHeader": {"requestApiKey": api_key, "requestApiVersion": 1, "correlationId": 5,
                              "clientId": client_id, "requestApiKeyName": name},
            "request": {"groupId": "g"}, "response": {"errorCode": 0}, "connection": "a-b-1-2", "totalTimeMs": 0.3}
    return "Completed request:" + json.dumps(body, separators=(",", ":"))


def streams_heartbeat_message() -> str:
    """The message of the first StreamsGroupHeartbeat (88) line answered 0 that a real 4.4.0
    broker wrote (the Kafka Streams capture), as the decoder reads it."""
    with open(STREAMS_CAPTURE, encoding="utf-8") as f:
        for line in f:
            text = line.rstrip("\n").split("] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)")
            body = json.loads(text.removeprefix("Completed request:"))
            if body["requestHeader"]["requestApiKey"] == 88 and body["response"]["errorCode"] == 0:
                return text
    raise AssertionError(f"no StreamsGroupHeartbeat answered 0 in {STREAMS_CAPTURE}")


def kept_apis(messages: list[str]) -> set[int]:
    return {json.loads(m.removeprefix("Completed request:"))["requestHeader"]["requestApiKey"] for m in messages}


def run_log4j2(tmp_path: Path, messages: list[str], level: str = "DEBUG") -> list[str]:
    snippet = yaml.safe_load(SNIPPET.read_text())
    snippet["Configuration"]["Loggers"]["Logger"][0]["level"] = level  # what kafka-configs does at run time
    config = {"Configuration": {"status": "warn", "Appenders": snippet["Configuration"]["Appenders"],
                                "Loggers": {**snippet["Configuration"]["Loggers"], "Root": {"level": "OFF"}}}}
    config_path = tmp_path / "log4j2.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    jars = spark_jars()
    classpath = ":".join(str(p) for p in sorted(jars.glob("log4j-*.jar")) + sorted(jars.glob("jackson-*.jar")) + sorted(jars.glob("snakeyaml-*.jar")))
    java = shutil.which("java")
    assert java, "java not found (Java 17 is a project prerequisite)"
    result = subprocess.run(
        [java, "-cp", classpath, f"-Dlog4j2.configurationFile={config_path}", f"-Dkafka.logs.dir={tmp_path}",
         str(HERE / "Log4j2FilterCheck.java")],
        input="\n".join(messages) + "\n", capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR" not in result.stderr, result.stderr  # log4j's status logger: a config it could not read
    log = tmp_path / "kafka-request.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.mark.slow
def test_the_filter_keeps_exactly_the_decoded_apis_whole(tmp_path):
    kept = [message(8, "OFFSET_COMMIT"), message(28, "TXN_OFFSET_COMMIT"),
            message(68, "CONSUMER_GROUP_HEARTBEAT", forwarded=True),
            message(8, "OFFSET_COMMIT", client_id='tricky "requestApiKey":1, client ü'),
            message(11, "JOIN_GROUP"), message(13, "LEAVE_GROUP"), message(14, "SYNC_GROUP"),
            message(88, "STREAMS_GROUP_HEARTBEAT"), streams_heartbeat_message()]
    dropped = [message(0, "PRODUCE"), message(1, "FETCH"), message(80, "ADD_RAFT_VOTER"),
               message(12, "HEARTBEAT"), message(1, "FETCH", client_id='x "requestApiKey":88, y'),
               "Completed request:not json", "some other message", message(113, "OTHER"), message(140, "OTHER"),
               message(3, "METADATA"), message(89, "STREAMS_GROUP_DESCRIBE"), message(880, "OTHER"),
               message(1, "FETCH", client_id='x "requestApiKey":8, y')]
    assert kept_apis(kept) == set(DECODED_APIS), "every API the decoder reads is tried"
    order = [dropped[0], kept[0], dropped[1], kept[1], dropped[2], kept[2], dropped[3], dropped[4], kept[3],
             dropped[5], dropped[6], kept[4], dropped[7], kept[5], dropped[8], kept[6], dropped[9], kept[7],
             dropped[10], kept[8], dropped[11], dropped[12]]
    assert sorted(order) == sorted(kept + dropped)
    lines = run_log4j2(tmp_path, order)

    assert len(lines) == len(kept)
    for line, msg in zip(lines, kept):
        # Kafka's pattern "[%d] %p %m (%c)": the decoder's line format (SPEC 10)
        assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] DEBUG (.*) \(kafka\.request\.logger\)", line)
        assert line.split("] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)") == msg


@pytest.mark.slow
def test_at_warn_the_logger_writes_nothing(tmp_path):
    assert run_log4j2(tmp_path, [message(8, "OFFSET_COMMIT")], level="WARN") == []


LOG4J1_SNIPPET = SNIPPET.with_name("log4j-request-filter.properties")


@pytest.mark.slow
def test_the_log4j1_properties_filter_keeps_exactly_the_decoded_apis(tmp_path):
    """Kafka 3.x's log4j.properties syntax, read by log4j's 1.x compatibility layer (log4j-1.2-api
    2.25, the closest to reload4j that runs here): Kafka's requestAppender plus the shipped lines."""
    log = tmp_path / "kafka-request.log"
    config = tmp_path / "log4j.properties"
    config.write_text(
        "log4j.rootLogger=OFF\n"
        "log4j.appender.requestAppender=org.apache.log4j.FileAppender\n"
        f"log4j.appender.requestAppender.File={log}\n"
        "log4j.appender.requestAppender.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.requestAppender.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        "log4j.logger.kafka.request.logger=DEBUG, requestAppender\n"
        "log4j.additivity.kafka.request.logger=false\n" + LOG4J1_SNIPPET.read_text()
    )
    kept = [message(8, "OFFSET_COMMIT"), message(28, "TXN_OFFSET_COMMIT"), message(68, "CONSUMER_GROUP_HEARTBEAT"),
            message(11, "JOIN_GROUP"), message(13, "LEAVE_GROUP"), message(14, "SYNC_GROUP"),
            message(88, "STREAMS_GROUP_HEARTBEAT"), streams_heartbeat_message()]
    dropped = [message(0, "PRODUCE"), message(1, "FETCH"), message(80, "ADD_RAFT_VOTER"), message(12, "HEARTBEAT"),
               message(113, "OTHER"), message(3, "METADATA"), message(89, "STREAMS_GROUP_DESCRIBE"),
               message(880, "OTHER")]
    assert kept_apis(kept) == set(DECODED_APIS), "every API the decoder reads is tried"
    jars = spark_jars()
    classpath = ":".join(str(p) for p in sorted(jars.glob("log4j-*.jar")))
    result = subprocess.run(
        [shutil.which("java") or "java", "-cp", classpath, "-Dlog4j1.compatibility=true",
         f"-Dlog4j.configuration=file:{config}", str(HERE / "Log4j2FilterCheck.java")],
        input="\n".join([dropped[0], kept[0], dropped[1], kept[1], dropped[2], kept[2], dropped[3], kept[3],
                         dropped[4], kept[4], kept[5], dropped[5], kept[6], dropped[6], kept[7], dropped[7]]) + "\n",
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert [line.split("] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)") for line in lines] == kept
