"""deploy/compose.yaml: every address in the stack leads to a service that listens there.

No container engine runs here, so the stack is read, not started: each ``host:port`` written in
a service's command, environment or healthcheck, in Kafka's listeners, in Prometheus' scrape
targets and in Grafana's provisioning must name a service (or its hostname) and a port that
service listens on, as derived from that service's own settings; ``localhost`` addresses (those
advertised to the host) must be published ports. Mounted files and folders must exist, and
fencewatch commands must parse with fencewatch's own CLI.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy_files import DEPLOY, ROOT

COMPOSE = DEPLOY / "compose.yaml"
FENCEWATCH_IMAGE = "fencewatch:"
GRAFANA_DEFAULT_PORT = 3000        # Grafana's [server] http_port default (GF_SERVER_HTTP_PORT overrides)
PROMETHEUS_DEFAULT_PORT = 9090     # Prometheus' --web.listen-address default
HOST_PORT = re.compile(r"(?:(?<=//)|(?<=@)|(?<=[\s=,'\"\[])|^)([A-Za-z][\w.-]*):(\d{2,5})\b")


def _stack() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _services() -> dict[str, dict]:
    return _stack()["services"]


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def _argv(value) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _kafka_listeners(env: dict[str, str], key: str) -> dict[str, tuple[str, int]]:
    out = {}
    for item in env.get(key, "").split(","):
        name, _, rest = item.strip().partition("://")
        host, _, port = rest.rpartition(":")
        out[name] = (host, int(port))
    return out


def _fencewatch_args(service: dict):
    from fencewatch.streaming.cli import build_parser

    argv = _argv(service.get("command"))
    return build_parser(argv).parse_args(argv)


def listening_ports(name: str, service: dict) -> set[int]:
    """Ports a service listens on, from its own settings (each image the stack uses is known)."""
    image, env = service.get("image", ""), _env(service)
    if image.startswith("apache/kafka:"):
        return {port for _, port in _kafka_listeners(env, "KAFKA_LISTENERS").values()}
    if image.startswith(FENCEWATCH_IMAGE):
        args = _fencewatch_args(service)
        from fencewatch.streaming.config.settings import load_config

        environ = {k: v for k, v in env.items() if k.startswith("FENCEWATCH_")}
        if args.command == "bridge" and args.bootstrap_servers:  # live: its metrics and probes
            from fencewatch.streaming.commands.bridge import metrics_port

            return {metrics_port(args, load_config(environ=environ), environ)}
        if args.command != "run":
            return set()
        port = load_config(environ=environ).sinks.metrics_port
        return {args.metrics_port or port}
    if image.startswith("prom/prometheus:"):
        flags = [a for a in _argv(service.get("command")) if a.startswith("--web.listen-address=")]
        return {int(flags[-1].rpartition(":")[2])} if flags else {PROMETHEUS_DEFAULT_PORT}
    if image.startswith("grafana/grafana:"):
        return {int(env.get("GF_SERVER_HTTP_PORT", GRAFANA_DEFAULT_PORT))}
    raise AssertionError(f"{name}: image {image!r} unknown to this test; teach listening_ports about it")


def _names(name: str, service: dict) -> set[str]:
    return {name, service.get("hostname", name), service.get("container_name", name)}


def _published(service: dict) -> dict[int, int]:
    """host port -> container port."""
    out = {}
    for p in service.get("ports", []):
        host, _, container = str(p).rpartition(":")
        out[int(host.rpartition(":")[2])] = int(container.split("/")[0])
    return out


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def resolve(address: str, where: str, *, from_host: bool = False) -> tuple[str, int]:
    """The (service, port) an address reaches, or an assertion naming the broken reference."""
    host, _, port = address.rpartition(":")
    host = host.split("//")[-1]
    services = _services()
    if host in ("localhost", "127.0.0.1"):
        assert from_host, f"{where}: {address} inside a container is that container itself"
        for name, service in services.items():
            container_port = _published(service).get(int(port))
            if container_port is not None:
                assert container_port in listening_ports(name, service), \
                    f"{where}: {address} is published to {name}:{container_port}, where nothing listens"
                return name, container_port
        raise AssertionError(f"{where}: {address}: no service publishes port {port} to the host")
    owners = [n for n, s in services.items() if host in _names(n, s)]
    assert owners, f"{where}: {address}: no service is called {host!r}"
    listening = listening_ports(owners[0], services[owners[0]])
    assert int(port) in listening, f"{where}: {address}: {owners[0]} listens on {sorted(listening)}"
    return owners[0], int(port)


# --------------------------------------------------------------------------- addresses


def _service_addresses() -> list[tuple[str, str]]:
    out = []
    for name, service in _services().items():
        # Kafka's listener settings are followed by their own test, with their own rules.
        env = {k: v for k, v in _env(service).items() if "LISTENERS" not in k and "QUORUM_VOTERS" not in k}
        for key, value in (("command", service.get("command")), ("entrypoint", service.get("entrypoint")),
                           ("environment", env), ("healthcheck", service.get("healthcheck"))):
            for text in _strings(value):
                for m in HOST_PORT.finditer(text):
                    out.append((f"{name}.{key}", f"{m.group(1)}:{m.group(2)}"))
    return out


ADDRESSES = _service_addresses()


def test_the_stack_names_addresses_at_all():
    assert len(ADDRESSES) >= 5, ADDRESSES


@pytest.mark.parametrize("where,address", ADDRESSES, ids=[f"{w}->{a}" for w, a in ADDRESSES])
def test_address_in_a_service_reaches_a_listening_service(where, address):
    resolve(address, where, from_host=False)


def test_the_resolver_rejects_what_would_not_connect():
    """Negative control: the checks above can fail."""
    with pytest.raises(AssertionError, match="no service"):
        resolve("broker:9092", "control")
    with pytest.raises(AssertionError, match="listens on"):
        resolve("kafka:9094", "control")
    with pytest.raises(AssertionError, match="itself"):
        resolve("localhost:9092", "control")


def test_kafka_advertises_service_names_to_containers_and_localhost_to_the_host():
    kafka = _services()["kafka"]
    env = _env(kafka)
    listeners = _kafka_listeners(env, "KAFKA_LISTENERS")
    advertised = _kafka_listeners(env, "KAFKA_ADVERTISED_LISTENERS")
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(listeners) <= set(protocols)
    assert set(advertised) == set(listeners) - {controller}, "every client listener is advertised"
    for name, (host, port) in advertised.items():
        assert listeners[name][1] == port, f"{name} is advertised on another port than it binds"
        resolve(f"{host}:{port}", f"kafka advertised {name}", from_host=host == "localhost")
    container_side = [n for n, (h, _) in advertised.items() if h != "localhost"]
    host_side = [n for n, (h, _) in advertised.items() if h == "localhost"]
    assert container_side and host_side
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in container_side
    for voter in env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","):
        node, _, address = voter.partition("@")
        assert node == env["KAFKA_NODE_ID"]
        _, port = resolve(address, "controller quorum")
        assert port == listeners[controller][1]


def test_fencewatch_clients_bootstrap_through_the_listener_advertised_to_containers():
    env = _env(_services()["kafka"])
    advertised = _kafka_listeners(env, "KAFKA_ADVERTISED_LISTENERS")
    for name, service in _services().items():
        if not service.get("image", "").startswith(FENCEWATCH_IMAGE):
            continue
        args = _fencewatch_args(service)
        assert args.bootstrap_servers, f"{name}: no --bootstrap-servers"
        for address in args.bootstrap_servers.split(","):
            _, port = resolve(address, name)
            listener = next(n for n, (_, p) in advertised.items() if p == port)
            host = advertised[listener][0]
            assert host != "localhost", f"{name} would be sent to localhost by the metadata it gets"


def test_published_ports_land_on_listening_ports():
    for name, service in _services().items():
        for host_port, container_port in _published(service).items():
            assert container_port in listening_ports(name, service), f"{name}: {host_port}:{container_port}"


def test_prometheus_scrapes_the_job_by_service_name_with_the_shipped_rules():
    service = _services()["prometheus"]
    mounts = _bind_mounts(service)
    config_target = next(a for a in _argv(service["command"]) if a.startswith("--config.file=")).split("=", 1)[1]
    config = yaml.safe_load(mounts[config_target].read_text())
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    scraped = {resolve(t, "prometheus scrape") for t in targets}
    assert ("fencewatch", 9464) in scraped
    assert ("fencewatch-bridge", 9465) in scraped  # the bridge's own metrics
    for pattern in config["rule_files"]:
        folder, _, glob = pattern.rpartition("/")
        assert folder in mounts, f"rule_files {pattern}: {folder} is not mounted"
        assert list(mounts[folder].glob(glob)), f"rule_files {pattern} matches no shipped rule file"


def _bind_mounts(service: dict) -> dict[str, Path]:
    """container path -> host path (relative to deploy/, as compose resolves them)."""
    out = {}
    for v in service.get("volumes", []):
        source, target = str(v).split(":")[:2]
        if source.startswith((".", "/")):
            out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_every_bind_mount_exists_and_named_volumes_are_declared():
    declared = set(_stack().get("volumes") or {})
    for name, service in _services().items():
        for v in service.get("volumes", []):
            source = str(v).split(":")[0]
            if source.startswith((".", "/")):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"


def test_grafana_provisions_prometheus_by_service_name_and_the_shipped_dashboards():
    service = _services()["grafana"]
    mounts = _bind_mounts(service)
    datasources = [p for t, p in mounts.items() if t.startswith("/etc/grafana/provisioning/datasources/")]
    providers = [p for t, p in mounts.items() if t.startswith("/etc/grafana/provisioning/dashboards/")]
    assert datasources and providers
    for path in datasources:
        for ds in yaml.safe_load(path.read_text())["datasources"]:
            m = HOST_PORT.search(ds["url"])
            assert resolve(f"{m.group(1)}:{m.group(2)}", f"grafana datasource {ds['name']}")[0] == "prometheus"
    for path in providers:
        for provider in yaml.safe_load(path.read_text())["providers"]:
            folder = provider["options"]["path"]
            assert folder in mounts, f"dashboards provider reads {folder}, which is not mounted"
            dashboards = sorted(mounts[folder].glob("*.json"))
            assert dashboards and dashboards == sorted((ROOT / "dashboards/grafana/dashboards").glob("*.json"))


def test_dependencies_name_services_and_the_build_uses_the_shipped_dockerfile():
    services = _services()
    for name, service in services.items():
        deps = service.get("depends_on") or []
        for dep in deps:
            assert dep in services, f"{name} depends on unknown {dep}"
        if "build" in service:
            build = service["build"]
            context = (COMPOSE.parent / build["context"]).resolve()
            assert context == ROOT and (context / build["dockerfile"]).is_file()


def test_fencewatch_services_run_commands_the_cli_accepts():
    ran = set()
    for name, service in _services().items():
        if service.get("image", "").startswith(FENCEWATCH_IMAGE):
            ran.add(_fencewatch_args(service).command)
    assert {"run", "bridge"} <= ran


def test_prometheus_accepts_its_compose_config_as_the_container_sees_it(tmp_path):
    """``promtool check config`` on the mounted config, container paths mapped to their mounts."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (`make system-deps`)"
    service = _services()["prometheus"]
    mounts = _bind_mounts(service)
    config_target = next(a for a in _argv(service["command"]) if a.startswith("--config.file=")).split("=", 1)[1]
    text = mounts[config_target].read_text()
    for target, source in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(target, str(source))
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    done = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rule files found" in done.stdout and " 0 rule files" not in done.stdout


def test_the_job_keeps_its_checkpoint_on_a_volume_and_images_carry_the_project_version():
    from deploy_files import one, pyproject

    version = pyproject()["project"]["version"]
    job = _services()["fencewatch"]
    args = _fencewatch_args(job)
    mounts = [str(v).split(":")[1] for v in job.get("volumes", [])]
    assert any(args.checkpoint.startswith(m.rstrip("/") + "/") for m in mounts), "a restart must find the checkpoint"
    assert (job.get("healthcheck") or {}).get("disable") is not True, "the image's HEALTHCHECK watches the job"
    bridge = _services()["fencewatch-bridge"]
    assert (bridge.get("healthcheck") or {}).get("disable") is not True, "and the bridge (its /healthz on 9465)"
    assert listening_ports("fencewatch-bridge", bridge) == {int(_env(bridge)["FENCEWATCH_SINKS__METRICS_PORT"])}
    images = {s["image"] for s in _services().values() if s.get("image", "").startswith(FENCEWATCH_IMAGE)}
    assert images == {f"fencewatch:{version}"}
    k8s = {one("SparkApplication")["spec"]["image"],
           one("Deployment", "fencewatch-bridge")["spec"]["template"]["spec"]["containers"][0]["image"]}
    assert {i.rsplit(":", 1)[1] for i in k8s} == {version}


# Kafka's own default for where partitions live when neither log.dirs nor log.dir is set
# (ServerLogConfigs.LOG_DIR_DEFAULT): inside the container, lost with it.
KAFKA_DEFAULT_LOG_DIR = "/tmp/kafka-logs"


def _kafka_properties(env: dict[str, str]) -> dict[str, str]:
    """Broker properties from the apache/kafka image's KAFKA_* variables (Kafka's docker/README:
    '.' is written '_', '_' is '__', '-' is '___'; the prefix dropped, lower case)."""
    out = {}
    for name, value in env.items():
        if name.startswith("KAFKA_"):
            key = name[len("KAFKA_"):].lower().replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")
            out[key] = value
    return out


def _broker_data_dirs(service: dict) -> list[str]:
    """Where the broker writes its partitions and its KRaft metadata log."""
    props = _kafka_properties(_env(service))
    dirs = (props.get("log.dirs") or props.get("log.dir") or KAFKA_DEFAULT_LOG_DIR).split(",")
    return dirs + [props["metadata.log.dir"]] if "metadata.log.dir" in props else dirs


def _named_volume_mounts(service: dict) -> list[str]:
    return [str(v).split(":")[1] for v in service.get("volumes", []) if not str(v).startswith((".", "/"))]


def _on_a_volume(path: str, mounts: list[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def test_the_broker_keeps_its_data_on_its_volume():
    kafka = _services()["kafka"]
    mounts = _named_volume_mounts(kafka)
    assert mounts, "the broker has a named volume"
    for path in _broker_data_dirs(kafka):
        assert _on_a_volume(path, mounts), f"the broker writes {path}, outside its volume {mounts}"


def test_without_log_dirs_the_broker_would_write_outside_its_volume():
    """Negative control: the image's variables unset, Kafka's default folder is in the container."""
    kafka = _services()["kafka"]
    kafka["environment"] = {k: v for k, v in _env(kafka).items() if k not in ("KAFKA_LOG_DIRS", "KAFKA_LOG_DIR")}
    assert _broker_data_dirs(kafka) == [KAFKA_DEFAULT_LOG_DIR]
    assert not _on_a_volume(KAFKA_DEFAULT_LOG_DIR, _named_volume_mounts(kafka))
    assert _kafka_properties({"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "x", "KAFKA_SASL___X__Y": "z"}) == \
        {"listener.security.protocol.map": "x", "sasl-x_y": "z"}
