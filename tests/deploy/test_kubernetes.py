"""deploy/kubernetes as ``kubectl apply -k`` sends it: valid against Kubernetes' and the
operators' own schemas, and wired to each other, to fencewatch's config and to the image.

The manifests are rendered with kustomize (``make kustomize``). Built-in kinds are checked with
``kubernetes-validate`` (Kubernetes' OpenAPI schemas, strict: an unknown field fails); the
custom resources (SparkApplication, PodMonitor, PrometheusRule) against their CRDs' schemas
(``crd_schemas.py``, sources in ``crds/README.md``); the driver and executor pods the
spark-operator makes of the SparkApplication are validated as Pods. No cluster runs here: what
the operators and the kubelet do at run time is not exercised (``k8s_objects.py`` restates the
kubelet's environment rules).
"""
from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

import crd_schemas
from deploy_files import KUBERNETES, ROOT, dockerfile_args, dockerfile_instructions, one, pyproject, rendered
from k8s_objects import SECRET_VALUES, container_env, expand, pod_of

K8S = kubernetes_validate.latest_version()


def _custom(doc: dict) -> bool:
    return (doc["apiVersion"], doc["kind"]) in crd_schemas.stored()


def _ids(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def _app() -> dict:
    return one("SparkApplication")


def _bridge() -> dict:
    return one("Deployment", "fencewatch-bridge")


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("doc", [d for d in rendered() if not _custom(d)], ids=_ids)
def test_built_in_object_is_valid_for_kubernetes(doc):
    kubernetes_validate.validate(doc, K8S, strict=True)


@pytest.mark.parametrize("doc", [d for d in rendered() if _custom(d)], ids=_ids)
def test_custom_resource_is_valid_for_its_operators_crd(doc):
    assert crd_schemas.problems(doc) == []


def test_every_kind_rendered_is_validated_somewhere():
    kinds = {d["kind"] for d in rendered()}
    assert {"SparkApplication", "PodMonitor", "PrometheusRule", "Deployment", "ConfigMap"} <= kinds


def test_the_validators_would_catch_a_misspelt_field():
    """Negative controls: strict validation rejects an unknown field, so the tests above can fail."""
    bridge = copy.deepcopy(_bridge())
    bridge["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bridge, K8S, strict=True)
    app = copy.deepcopy(_app())
    app["spec"]["driver"]["javaOption"] = "-Dx=1"
    app["spec"]["executor"]["instances"] = "2"
    assert len(crd_schemas.problems(app)) == 2
    monitor = copy.deepcopy(one("PodMonitor", "fencewatch"))
    monitor["spec"]["podMetricsEndpoints"][0]["scrapeIntervall"] = "30s"
    assert crd_schemas.problems(monitor)
    rule = copy.deepcopy(one("PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "2 minutes"
    assert crd_schemas.problems(rule)


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    generated = {f for g in kust["configMapGenerator"] for f in g.get("files", [])}
    files = {str(p.relative_to(KUBERNETES)) for p in KUBERNETES.glob("*.yaml")} | \
            {str(p.relative_to(KUBERNETES)) for p in (KUBERNETES / "log4j2").iterdir()}
    assert set(kust["resources"]) | generated | {"kustomization.yaml", *kust["configurations"]} == files


def test_every_namespaced_object_lives_in_the_namespace():
    ns = one("Namespace")["metadata"]["name"]
    for doc in rendered():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == ns, _ids(doc)


# --------------------------------------------------------------------------- the SparkApplication


def test_spark_application_is_a_restarting_python_streaming_job():
    spec = _app()["spec"]
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["restartPolicy"]["type"] == "Always", "a streaming query is restarted from its checkpoint"
    for role in ("driver", "executor"):
        assert re.fullmatch(r"\d+[kmg]", spec[role]["memory"]), "Spark memory syntax (512m, 4g)"


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_the_pods_the_operator_makes_are_valid_for_kubernetes(role):
    kubernetes_validate.validate(pod_of(_app(), role), K8S, strict=True)


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_pods_run_as_the_images_non_root_user_on_a_read_only_root(role):
    pod = pod_of(_app(), role)
    uid = int(dockerfile_args(dockerfile_instructions())["UID"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == uid
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert set(mounts.values()) <= set(volumes), "every mount names a volume"
    assert "emptyDir" in volumes[mounts["/tmp"]], "Spark's scratch space is writable"
    assert "spark.jars.ivy" not in _app()["spec"]["sparkConf"], "nothing is fetched at submission: no Ivy cache"


def _driver_env(docs: list[dict] | None = None, secrets: dict | None = None) -> dict[str, str]:
    docs = rendered() if docs is None else docs
    return container_env(pod_of(one("SparkApplication", docs=docs), "driver")["spec"]["containers"][0], docs, secrets)


def job_config(docs: list[dict] | None = None, environ: dict | None = None, tmp: Path | None = None):
    """The job's Config as its driver loads it: the mounted file, then the pod's environment."""
    from fencewatch.streaming.config.settings import load_config

    docs = rendered() if docs is None else docs
    text = one("ConfigMap", "fencewatch-config", docs=docs)["data"]["fencewatch.yaml"]
    path = Path(pytest.importorskip("tempfile").mkdtemp() if tmp is None else tmp) / "fencewatch.yaml"
    path.write_text(text)
    return load_config(file=path, environ=_driver_env(docs) if environ is None else environ)


def test_the_job_config_is_valid_and_its_secrets_reach_the_kafka_clients():
    from fencewatch.streaming.config.settings import kafka_client_config

    env = _driver_env()
    cfg = job_config()
    kafka = one("ConfigMap", "fencewatch-kafka")["data"]
    assert cfg.streaming.bootstrap_servers == kafka["FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS"]
    assert cfg.streaming.kafka["security.protocol"] == kafka["FENCEWATCH_STREAMING__KAFKA__SECURITY_PROTOCOL"]
    assert cfg.streaming.kafka["sasl.username"] == "fencewatch" and cfg.streaming.kafka["sasl.password"] == "job-s3cret"
    assert kafka_client_config(cfg, "producer")["sasl.password"] == "job-s3cret"
    assert cfg.sinks.grafana_token == "glsa_token"
    assert cfg.streaming.schema_registry["basic.auth.user.info"] == "sr-user:sr-s3cret"
    assert cfg.sinks.alerts_topic == kafka["FENCEWATCH_SINKS__ALERTS_TOPIC"]
    assert cfg.streaming.spark_master == "", "the master is the operator's, not local[2]"
    unknown = [k for k in env if k.startswith("FENCEWATCH_") and k.split("__")[0] not in
               ("FENCEWATCH_STREAMING", "FENCEWATCH_SINKS", "FENCEWATCH_STATE", "FENCEWATCH_LOGGING")]
    assert not unknown, "every variable is one of fencewatch's settings"
    rendered_text = yaml.safe_dump_all(rendered())
    assert "s3cret" not in rendered_text, "no secret in the manifests"


def test_the_optional_secrets_may_be_left_out_of_the_secret():
    secrets = {"fencewatch": {k: v for k, v in SECRET_VALUES.items()
                              if k not in ("grafana-token", "schema-registry-user-info")}}
    cfg = job_config(environ=_driver_env(secrets=secrets))
    assert cfg.sinks.grafana_token is None and not cfg.streaming.schema_registry
    with pytest.raises(AssertionError, match="job-sasl-password"):
        _driver_env(secrets={"fencewatch": {"job-sasl-username": "fencewatch"}})


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_checkpoint_is_on_the_shared_claim_in_every_pod(role):
    cfg = job_config()
    pod = pod_of(_app(), role)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    holding = [m for m in mounts if cfg.streaming.checkpoint_location.startswith(m["mountPath"] + "/")]
    assert holding, f"{role}: checkpoint {cfg.streaming.checkpoint_location} is on no mount"
    claim = volumes[holding[0]["name"]]["persistentVolumeClaim"]["claimName"]
    pvc = one("PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "driver and executors write the checkpoint"


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_the_kafka_ca_is_mounted_wherever_kafka_clients_run(role):
    """The Python source's consumers run in the executors: an ssl.ca.location must exist there too."""
    pod = pod_of(_app(), role)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    ca = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if "secret" in volumes[m["name"]]]
    assert [volumes[m["name"]]["secret"] for m in ca] == [{"secretName": "fencewatch-kafka-ca", "optional": True}]
    bridge = _bridge()["spec"]["template"]["spec"]
    assert [m["mountPath"] for m in bridge["containers"][0]["volumeMounts"] if m["name"] == "kafka-ca"] == \
        [m["mountPath"] for m in ca]


def test_driver_config_file_is_mounted_where_the_arguments_read_it():
    app = _app()
    from fencewatch.streaming.cli import build_parser

    args = build_parser(app["spec"]["arguments"]).parse_args(app["spec"]["arguments"])
    assert args.command == "run"
    mounts = pod_of(app, "driver")["spec"]["containers"][0]["volumeMounts"]
    config_mount = next(m for m in mounts if args.config.startswith(m["mountPath"] + "/"))
    volume = next(v for v in app["spec"]["volumes"] if v["name"] == config_mount["name"])
    cm = one("ConfigMap", volume["configMap"]["name"])
    assert cm["metadata"]["name"] == volume["configMap"]["name"], "the generated (hashed) name is referenced"
    assert Path(args.config).name in cm["data"]
    main = app["spec"]["mainApplicationFile"]
    copied = [i.args for i in dockerfile_instructions() if i.keyword == "COPY" and "fencewatch_main.py" in i.args]
    assert main == "local://" + copied[0].split()[-1], "the main file is the one the image holds"


def _references(node, kinds=("configMapRef", "configMapKeyRef", "configMap")):
    """Names under configMapRef / configMapKeyRef / configMap anywhere in an object."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in kinds and isinstance(value, dict):
                yield value["name"]
            yield from _references(value, kinds)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value, kinds)


def test_every_config_map_a_pod_reads_is_rendered_under_its_hashed_name():
    """kustomize's hashed names reached every reference (kustomizeconfig.yaml's nameReference)."""
    docs = rendered()
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    for workload in ("SparkApplication", "Deployment"):
        refs = set(_references(one(workload, docs=docs)))
        assert refs and refs <= names, f"{workload}: {refs - names}"
    assert all(re.search(r"-[a-z0-9]{10}$", n) for n in names), "generated: a change rolls the pods"


def test_probes_and_scrape_point_at_the_metrics_port_the_job_serves():
    cfg = job_config()
    port = cfg.sinks.metrics_port
    assert cfg.sinks.metrics_host == "0.0.0.0", "reachable from the kubelet and Prometheus"
    pod = pod_of(_app(), "driver")
    container = pod["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert {"name": "metrics", "protocol": "TCP", "containerPort": port} in container["ports"]
    # The scrape path itself (a PodMonitor by default, pod annotations with the component) is
    # tests/deploy/test_scrape_paths.py's; the annotations' port is checked there against this one.


def test_driver_runs_with_the_service_account_the_role_binding_grants():
    sa = _app()["spec"]["driver"]["serviceAccount"]
    binding = one("RoleBinding")
    assert {"kind": "ServiceAccount", "name": sa, "namespace": "fencewatch"} in binding["subjects"]
    role = one("Role", binding["roleRef"]["name"])
    pods = next(r for r in role["rules"] if "pods" in r["resources"])
    assert {"create", "delete", "watch", "list", "get"} <= set(pods["verbs"]), "the driver manages executors"


def test_kafka_connector_is_baked_into_the_image_at_sparks_version_and_nothing_is_fetched_at_submit():
    """spark-sql-kafka-0-10 must be the exact Spark version (and Scala) the image runs; it comes
    from the image's jars stage (pom-connector.xml), so the application fetches nothing."""
    import pyspark

    app = _app()
    spark_version = app["spec"]["sparkVersion"]
    conf = app["spec"]["sparkConf"]
    assert not [k for k in conf if k.startswith("spark.jars")], "no spark.jars.packages: nothing to fetch"
    instructions = dockerfile_instructions()
    assert spark_version == dockerfile_args(instructions)["SPARK_VERSION"]
    fetch = " ".join(i.args for i in instructions if i.keyword == "RUN" and "pom-connector.xml" in i.args)
    assert "-Dspark.version=${SPARK_VERSION}" in fetch, "the image fetches the connector at Spark's version"
    assert "<artifactId>spark-sql-kafka-0-10_2.13</artifactId>" in (ROOT / "pom-connector.xml").read_text()
    assert any(i.keyword == "COPY" and i.args.startswith("--from=jars ") and i.args.endswith("pyspark/jars/")
               for i in instructions), "the jars go into Spark's own jars"
    pin = next(Requirement(d) for d in pyproject()["project"]["dependencies"] if d.startswith("pyspark"))
    assert Version(spark_version) in pin.specifier
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")]
    assert jars and jars[0].startswith("spark-core_2.13-"), "pyspark's jars are built for Scala 2.13"
    job = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "fencewatch.yaml").read_text())
    assert job["streaming"]["kafka_source"] == "spark", "the job says which reader it expects"
    assert "spark-submit" in (ROOT / "deploy" / "spark-submit.sh").read_text()


# --------------------------------------------------------------------------- the bridge


def bridge_args(docs: list[dict] | None = None, secrets: dict | None = None):
    """The bridge's parsed command line and environment, ``$(VAR)`` expanded as the kubelet does."""
    from fencewatch.streaming.cli import build_parser

    docs = rendered() if docs is None else docs
    container = one("Deployment", "fencewatch-bridge", docs=docs)["spec"]["template"]["spec"]["containers"][0]
    env = container_env(container, docs, secrets)
    argv = [expand(a, env) for a in container["args"]]
    return build_parser(argv).parse_args(argv), env


def test_bridge_runs_a_command_the_cli_accepts_on_the_jobs_kafka_with_its_own_credentials():
    from fencewatch.streaming.config.settings import load_config

    bridge = _bridge()
    assert bridge["spec"]["replicas"] == 1, "two bridges would write every event twice"
    args, env = bridge_args()
    cfg = job_config()
    assert args.command == "bridge"
    assert not any("$(" in a for a in vars(args).values() if isinstance(a, str)), "every $(VAR) is defined"
    assert args.bootstrap_servers == cfg.streaming.bootstrap_servers, "one cluster"
    assert (args.heartbeats_topic, args.offsets_topic) == (cfg.streaming.heartbeats_topic, cfg.streaming.offsets_topic)
    assert args.cluster == cfg.streaming.cluster != "default", "the bridge's events and series name the job's cluster"
    # The bridge's clients take the environment's streaming.kafka (streaming/commands/bridge.py).
    bridge_cfg = load_config(environ=env)
    assert bridge_cfg.streaming.kafka["sasl.username"] == "fencewatch-bridge"
    assert bridge_cfg.streaming.kafka["sasl.password"] == "bridge-s3cret"
    assert bridge_cfg.streaming.kafka["sasl.mechanism"] == cfg.streaming.kafka["sasl.mechanism"]
    container = bridge["spec"]["template"]["spec"]["containers"][0]
    assert not any("s3cret" in a for a in container["args"]), "no secret on the command line"
    assert bridge["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"] == _app()["spec"]["image"], "one image for every role"


def test_an_undefined_variable_in_the_bridges_arguments_would_show():
    """Negative control: without the ConfigMap, $(VAR) stays unexpanded (as the kubelet leaves it)."""
    docs = [d for d in rendered() if not d["metadata"]["name"].startswith("fencewatch-kafka")]
    container = one("Deployment", "fencewatch-bridge", docs=docs)["spec"]["template"]["spec"]["containers"][0]
    container["envFrom"][0]["configMapRef"]["optional"] = True
    argv = [expand(a, container_env(container, docs)) for a in container["args"]]
    assert "--bootstrap-servers=$(FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS)" in argv


def test_bridge_serves_metrics_and_probes_on_its_metrics_port():
    _, env = bridge_args()
    from fencewatch.streaming.config.settings import load_config

    port = load_config(environ=env).sinks.metrics_port
    assert port != job_config().sinks.metrics_port, "its own port (it may share a host with the job locally)"
    container = _bridge()["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert env["FENCEWATCH_SINKS__METRICS_HOST"] == "0.0.0.0"


# --------------------------------------------------------------------------- monitoring


@pytest.mark.parametrize("monitor,workload", [("fencewatch", "driver"), ("fencewatch-bridge", "bridge")])
def test_pod_monitor_scrapes_the_metrics_port_of_the_pods_that_serve_it(monitor, workload):
    pm = one("PodMonitor", monitor)
    if workload == "driver":
        pod = pod_of(_app(), "driver")
        labels, containers = pod["metadata"]["labels"], pod["spec"]["containers"]
        assert not pm["spec"]["selector"]["matchLabels"].items() <= pod_of(_app(), "executor")["metadata"]["labels"].items()
    else:
        template = _bridge()["spec"]["template"]
        labels, containers = template["metadata"]["labels"], template["spec"]["containers"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for c in containers for p in c.get("ports", [])}
    for endpoint in pm["spec"]["podMetricsEndpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"


def test_the_prometheus_rule_is_the_shipped_rules_with_the_job_label_the_pod_monitor_gives():
    from fencewatch.dashboards import rules

    rule = one("PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(rules.render())["groups"], "generate: dashboards/generate.py"
    job = pod_of(_app(), "driver")["metadata"]["labels"][one("PodMonitor", "fencewatch")["spec"]["jobLabel"]]
    absent = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "FencewatchMonitorAbsent")
    assert f'up{{job="{job}"}}' in absent["expr"]
    other = yaml.safe_load(rules.render_prometheus_rule(rules.load(overrides={"monitor_job": "team-a/fencewatch"})))
    assert 'up{job="team-a/fencewatch"}' in yaml.safe_dump(other), "the job label is a setting"
    with pytest.raises(rules.AlertRulesConfigError, match="monitor_job"):
        rules.load(overrides={"monitor_job": 'a"b'})


def test_promtool_accepts_the_prometheus_rules_groups(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (`make system-deps`)"
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": one("PrometheusRule")["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
