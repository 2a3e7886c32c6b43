"""Every API whose coordinator-routing answers the request-log bridge counts is one the bridge's
metrics export (``sinks.metrics.ROUTING_APIS``): a name missing there is counted and never seen
(StreamsGroupHeartbeat was, until this test)."""
from __future__ import annotations

import json
from pathlib import Path

from fencewatch.sinks.metrics import ROUTING_APIS
from fencewatch.sim.live.expect import read_request_log
from fencewatch.streaming.ingest.request_log import DECODED_APIS, RequestLogBridge

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURES = [FIXTURES / "kafka" / "4.2.2", FIXTURES / "kafka" / "classic" / "4.2.2", FIXTURES / "kafka-streams" / "4.2.2"]
NOT_COORDINATOR = 16
MARK = "Completed request:"


def _answered_not_coordinator(body: dict) -> dict:
    """The same request answered NOT_COORDINATOR, everywhere the response has an error code."""
    def walk(node):
        if isinstance(node, dict):
            return {k: NOT_COORDINATOR if k == "errorCode" else walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    return {**body, "response": walk(body["response"])}


def test_each_decoded_apis_routing_answers_are_exported():
    seen = {}
    for folder in CAPTURES:
        lines = (folder / "request-log.txt").read_text(encoding="utf-8").splitlines()
        for line, body in zip([x for x in lines if MARK in x], read_request_log(lines)):
            seen.setdefault(body["requestHeader"]["requestApiKey"], (line, body))
    assert set(DECODED_APIS) <= set(seen), f"no captured line of APIs {set(DECODED_APIS) - set(seen)}"
    counted = set()
    for api in DECODED_APIS:
        line, body = seen[api]
        text = line[:line.index(MARK) + len(MARK)] + json.dumps(_answered_not_coordinator(body),
                                                               separators=(",", ":")) + " (kafka.request.logger)"
        bridge = RequestLogBridge({}, carry=False)
        assert bridge.events(text, "0") == [], api  # no event: contract §10.1 a
        assert {err for _, err in bridge.routing} == {"NOT_COORDINATOR"}, (api, dict(bridge.routing))
        counted |= {name for name, _ in bridge.routing}
    assert counted <= set(ROUTING_APIS), f"counted, not exported: {counted - set(ROUTING_APIS)}"
