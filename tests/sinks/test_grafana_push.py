"""`fencewatch grafana push` against a local HTTP stand-in for Grafana.

Grafana itself cannot be installed here (not in Debian, no binary on PyPI/npm), so
:class:`FakeGrafana` implements the few endpoints grafana-client calls (health, folders,
dashboards/db, annotations) on 127.0.0.1 and records every request. What is tested is
the request sequence and payloads our command sends, not Grafana's behaviour.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from fencewatch.dashboards import generate
from fencewatch.streaming.commands import grafana as grafana_command

TOKEN = "glsa_secret_token_do_not_log"


class FakeGrafana:
    def __init__(self, fail: dict[tuple[str, str], int] | None = None, prefix: str = "") -> None:
        self.prefix = prefix  # Grafana served under a sub-path (root_url with serve_from_sub_path)
        self.requests: list[dict] = []
        self.folders: list[dict] = []
        self.dashboards: dict[str, dict] = {}
        self.annotations: list[dict] = []
        self.fail = fail or {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _reply(self, status: int, body) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append({"method": method, "path": url.path, "query": parse_qs(url.query),
                                      "headers": dict(self.headers), "body": body})
                if (method, url.path) in fake.fail:
                    status = fake.fail[(method, url.path)]
                    return self._reply(status, {"message": f"stand-in says {status}"})
                if not url.path.startswith(fake.prefix + "/api/"):
                    return self._reply(404, {"message": "not found"})
                path = url.path[len(fake.prefix):]
                status, reply = fake.route(method, path, parse_qs(url.query), body)
                self._reply(status, reply)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def route(self, method, path, query, body):
        if (method, path) == ("GET", "/api/frontend/settings"):
            return 200, {"buildInfo": {"version": "12.1.0"}}
        if (method, path) == ("GET", "/api/folders"):
            return 200, self.folders
        if (method, path) == ("POST", "/api/folders"):
            folder = {"uid": body.get("uid") or "generated", "title": body["title"], "id": len(self.folders) + 1}
            self.folders.append(folder)
            return 200, folder
        if (method, path) == ("POST", "/api/dashboards/db"):
            uid = body["dashboard"]["uid"]
            self.dashboards[uid] = body
            return 200, {"status": "success", "uid": uid, "url": f"/d/{uid}/x", "version": 1}
        if (method, path) == ("GET", "/api/annotations"):
            tags = set(query.get("tags", []))
            return 200, [a for a in self.annotations if tags <= set(a["tags"])]
        if (method, path) == ("POST", "/api/annotations"):
            self.annotations.append(body)
            return 200, {"id": len(self.annotations), "message": "Annotation added"}
        return 404, {"message": "not found"}

    def paths(self, method=None):
        return [r["path"] for r in self.requests if method is None or r["method"] == method]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def grafana():
    fake = FakeGrafana()
    yield fake
    fake.close()


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="fencewatch")
    sub = parser.add_subparsers(dest="command")
    grafana_command.register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


def alert_line(alert_id, kind="ZOMBIE_COMMIT", ts=1_700_000_000_000, **extra):
    return json.dumps({"alert_id": alert_id, "ts": ts, "cluster": "east", "group_id": "orders", "kind": kind,
                       "severity": "warning", "summary": "member m1 committed orders-0 held by m2",
                       "details": {"status": "firing"} if kind == "FENCING_SPIKE" else {}, **extra})


def test_push_upserts_every_dashboard_into_a_created_folder(grafana, monkeypatch, capsys, caplog):
    caplog.set_level("DEBUG")
    monkeypatch.setenv("FENCEWATCH_GRAFANA_TOKEN", TOKEN)
    assert cli("grafana", "push", "--url", grafana.url, "--folder", "Kafka fencing") == 0
    assert grafana.folders == [{"uid": "kafka-fencing", "title": "Kafka fencing", "id": 1}]
    expected = generate.dashboards()
    assert set(grafana.dashboards) == {d["uid"] for d in expected.values()}
    for body in grafana.dashboards.values():
        assert body["overwrite"] is True and body["folderUid"] == "kafka-fencing"
        assert body["dashboard"]["id"] is None and body["dashboard"]["schemaVersion"] == 42
        assert body["message"].startswith("fencewatch ")
    assert all(r["headers"].get("Authorization") == f"Bearer {TOKEN}" for r in grafana.requests)
    out = capsys.readouterr()
    assert "3 dashboards in folder kafka-fencing" in out.out
    assert TOKEN not in out.out + out.err + caplog.text


def test_second_push_reuses_the_folder(grafana):
    assert cli("grafana", "push", "--url", grafana.url, "--token", TOKEN) == 0
    assert cli("grafana", "push", "--url", grafana.url, "--token", TOKEN) == 0
    assert grafana.paths("POST").count("/api/folders") == 1
    assert grafana.paths("POST").count("/api/dashboards/db") == 6


def test_basic_auth_in_the_url_is_used_but_never_printed(grafana, capsys, caplog):
    caplog.set_level("DEBUG")
    url = grafana.url.replace("http://", "http://admin:hunter2@")
    assert cli("grafana", "push", "--url", url, "--no-dashboards") == 0
    assert grafana.requests[0]["headers"]["Authorization"].startswith("Basic ")
    out = capsys.readouterr()
    assert "hunter2" not in out.out + out.err + caplog.text


def test_alerts_become_tagged_annotations_once(grafana, tmp_path, capsys):
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("\n".join([alert_line("a1"), alert_line("a2", kind="FENCING_SPIKE", ts=1_700_000_060_000)]) + "\n")
    assert cli("grafana", "push", "--url", grafana.url, "--token", TOKEN, "--no-dashboards",
               "--annotations-from", str(alerts)) == 0
    assert grafana.dashboards == {}
    assert [a["time"] for a in grafana.annotations] == [1_700_000_000_000, 1_700_000_060_000]
    first = grafana.annotations[0]
    assert first["tags"] == ["fencewatch", "ZOMBIE_COMMIT", "cluster:east", "group:orders", "severity:warning",
                             "alert_id:a1"]
    assert first["text"].startswith("ZOMBIE_COMMIT: member m1 committed orders-0 held by m2")
    assert "status:firing" in grafana.annotations[1]["tags"]
    # the lookup of existing annotations covers the file's time range
    lookup = [r for r in grafana.requests if r["method"] == "GET" and r["path"] == "/api/annotations"][0]
    assert lookup["query"]["from"] == ["1700000000000"] and lookup["query"]["to"] == ["1700000060000"]
    # pushing the same file again posts nothing new
    assert cli("grafana", "push", "--url", grafana.url, "--token", TOKEN, "--no-dashboards",
               "--annotations-from", str(alerts)) == 0
    assert len(grafana.annotations) == 2
    assert "0 posted, 2 already present" in capsys.readouterr().out


def test_bad_alert_lines_are_reported_and_the_rest_pushed(grafana, tmp_path, capsys):
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("\n".join([alert_line("a1"), "not json", json.dumps({"kind": "X"}), "[1]", alert_line("a2")]))
    code = cli("grafana", "push", "--url", grafana.url, "--token", TOKEN, "--no-dashboards",
               "--annotations-from", str(alerts))
    assert code == 1
    assert len(grafana.annotations) == 2
    err = capsys.readouterr().err
    assert f"{alerts}:2: skipped, not an alert record" in err
    assert f"{alerts}:3: skipped, not an alert record (missing alert_id, ts)" in err
    assert f"{alerts}:4: skipped" in err


@pytest.mark.parametrize(
    "fail, message",
    [
        ({("GET", "/api/frontend/settings"): 401}, "Grafana refused the credentials (401)"),
        ({("POST", "/api/folders"): 403}, "could not create folder 'fencewatch': the token lacks permission (403)"),
        ({("POST", "/api/dashboards/db"): 500}, "could not push dashboard fencewatch-fleet: Server Error 500"),
    ],
    ids=["unauthorized", "forbidden", "server-error"],
)
def test_grafana_errors_are_clear_and_exit_1(fail, message, capsys):
    fake = FakeGrafana(fail)
    try:
        assert cli("grafana", "push", "--url", fake.url, "--token", TOKEN) == 1
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and TOKEN not in err


def test_unreachable_grafana_and_bad_url(capsys):
    fake = FakeGrafana()
    url = fake.url
    fake.close()  # nothing listens there any more
    assert cli("grafana", "push", "--url", url, "--timeout", "2") == 1
    assert "could not reach Grafana at http://127.0.0.1:" in capsys.readouterr().err
    assert cli("grafana", "push", "--url", "grafana.local:3000") == 1
    assert "invalid Grafana URL" in capsys.readouterr().err


def test_dashboards_dir_pushes_those_files(grafana, tmp_path):
    (tmp_path / "mine.json").write_text(json.dumps({"uid": "mine", "title": "Mine", "id": 42, "panels": []}))
    assert cli("grafana", "push", "--url", grafana.url, "--dashboards-dir", str(tmp_path)) == 0
    assert list(grafana.dashboards) == ["mine"] and grafana.dashboards["mine"]["dashboard"]["id"] is None
    (tmp_path / "broken.json").write_text("{")
    assert cli("grafana", "push", "--url", grafana.url, "--dashboards-dir", str(tmp_path)) == 1


def test_path_prefix_is_kept():
    fake = FakeGrafana(prefix="/grafana")
    try:
        assert cli("grafana", "push", "--url", fake.url + "/grafana", "--token", TOKEN) == 0
        assert set(fake.paths()) >= {"/grafana/api/frontend/settings", "/grafana/api/dashboards/db"}
    finally:
        fake.close()


def test_the_configuration_gives_the_default_url_and_token(grafana, tmp_path, monkeypatch, capsys, caplog):
    """sinks.grafana_url / grafana_token (the job's config file, or FENCEWATCH_SINKS__GRAFANA_*) are
    the push's defaults; --url wins over them; the token read from the config is never shown."""
    caplog.set_level("DEBUG")
    config = tmp_path / "fencewatch.yaml"
    config.write_text(f"sinks: {{grafana_url: '{grafana.url}'}}\n")
    monkeypatch.setenv("FENCEWATCH_SINKS__GRAFANA_TOKEN", TOKEN)
    assert cli("grafana", "push", "--config", str(config)) == 0
    assert grafana.paths("POST").count("/api/dashboards/db") == 3
    assert all(r["headers"].get("Authorization") == f"Bearer {TOKEN}" for r in grafana.requests)
    out = capsys.readouterr()
    assert f"grafana {grafana.url}: 3 dashboards" in out.out and TOKEN not in out.out + out.err + caplog.text

    monkeypatch.setenv("FENCEWATCH_SINKS__GRAFANA_URL", "http://127.0.0.1:1")  # the environment over the file
    assert cli("grafana", "push", "--config", str(config), "--timeout", "2") == 1
    assert "127.0.0.1:1" in capsys.readouterr().err
    assert cli("grafana", "push", "--config", str(config), "--url", grafana.url) == 0  # the flag over both
