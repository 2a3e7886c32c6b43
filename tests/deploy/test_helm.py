"""deploy/helm/fencewatch as ``helm install`` would send it: ``helm lint --strict`` and ``helm
template`` for both modes (local StatefulSet, spark-operator SparkApplication) and several value
combinations, every object validated against Kubernetes' schemas (``kubernetes-validate``,
strict) or its operator's CRD schema (``crd_schemas.py``), and the chart's promises checked on
the rendered objects: one scrape path per pod, secrets referenced never inlined, the rules and
dashboards equal to their sources in dashboards/. Helm is built by ``make helm``; no cluster runs
here (the scheduler, the kubelet, Grafana's sidecar and the operators are not exercised).
"""
from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import crd_schemas
from deploy_files import ROOT, dockerfile_args, dockerfile_instructions, one
from k8s_objects import container_env, pod_of

CHART = ROOT / "deploy" / "helm" / "fencewatch"
K8S = kubernetes_validate.latest_version()
RELEASE, NAMESPACE = "fw", "monitoring"

# Value combinations rendered and validated: (id, --set pairs).
CASES = {
    "local": {},
    "local-annotations-no-bridge": {"scrape.mode": "annotations", "bridge.enabled": "false",
                                    "imagePullSecrets[0].name": "registry"},
    "local-plaintext-no-scrape": {"scrape.mode": "none", "kafka.saslMechanism": "", "kafka.securityProtocol": "PLAINTEXT",
                                  "prometheusRule.enabled": "false", "dashboards.enabled": "false"},
    "spark-operator": {"mode": "sparkOperator"},
    "spark-operator-annotations": {"mode": "sparkOperator", "scrape.mode": "annotations",
                                   "sparkOperator.checkpoint.existingClaim": "my-rwx",
                                   "imagePullSecrets[0].name": "registry"},
}


def helm() -> str:
    """The helm binary: $HELM, the one `make helm` builds, or one on the PATH."""
    version = re.search(r"^HELM_VERSION \?= (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    cache = Path(os.environ.get("TOOLS", Path.home() / ".cache" / "fencewatch-tools"))
    for candidate in (os.environ.get("HELM"), cache / f"helm-{version}" / "helm", shutil.which("helm")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise AssertionError(f"helm {version} not found: `make helm` builds it into {cache}")


def _set_args(values: dict[str, str]) -> list[str]:
    return [a for k, v in values.items() for a in ("--set-string" if k == "kafka.saslMechanism" else "--set", f"{k}={v}")]


def run_helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120)


@functools.cache
def _template(items: tuple[tuple[str, str], ...]) -> str:
    done = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *_set_args(dict(items)))
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(values: dict[str, str] | None = None) -> list[dict]:
    """``helm template`` with these values (a fresh copy each call)."""
    return [d for d in yaml.safe_load_all(_template(tuple(sorted((values or {}).items())))) if d]


def _ids(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def _custom(doc: dict) -> bool:
    return (doc["apiVersion"], doc["kind"]) in crd_schemas.stored()


def _all_objects():
    for case, values in CASES.items():
        for doc in render(values):
            yield pytest.param(doc, id=f"{case}:{_ids(doc)}")


# --------------------------------------------------------------------------- lint and schemas


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_strict_passes(case):
    done = run_helm("lint", "--strict", str(CHART), *_set_args(CASES[case]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize("doc", list(_all_objects()))
def test_every_rendered_object_is_valid(doc):
    if _custom(doc):
        assert crd_schemas.problems(doc) == []
    else:
        kubernetes_validate.validate(doc, K8S, strict=True)
    assert doc["metadata"]["namespace"] == NAMESPACE, "every object in the release's namespace"


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_the_pods_the_operator_makes_are_valid(role):
    kubernetes_validate.validate(pod_of(one("SparkApplication", docs=render(CASES["spark-operator"])), role), K8S,
                                 strict=True)


@pytest.mark.parametrize("setting, reason", [
    ("mode=cluster", "at '/mode'"),
    ("scrape.mode=both", "at '/scrape/mode'"),
    ("scrape.mod=none", "additional properties 'mod' not allowed"),
    ("local.cores=two", "at '/local/cores': got string, want integer"),
    ("kafka.extraEnv.SECURITY_PROTOCOL=SSL", "'SECURITY_PROTOCOL' does not match pattern"),
])
def test_a_bad_value_is_refused_naming_it(setting, reason):
    """values.schema.json: a misspelt key or a wrong value stops `helm install` before anything."""
    done = run_helm("template", RELEASE, str(CHART), "--set", setting)
    assert done.returncode != 0 and reason in done.stderr, done.stderr


def test_the_templates_refuse_a_bad_mode_without_the_schema_too():
    done = run_helm("template", RELEASE, str(CHART), "--skip-schema-validation", "--set", "mode=cluster")
    assert done.returncode != 0 and 'mode "cluster" is not one of: local, sparkOperator' in done.stderr


def test_the_validators_would_catch_a_misspelt_field():
    """Negative control: the strict validation above can fail on what this chart renders."""
    sts = copy.deepcopy(one("StatefulSet", docs=render()))
    sts["spec"]["volumeClaimTemplate"] = sts["spec"].pop("volumeClaimTemplates")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S, strict=True)
    app = copy.deepcopy(one("SparkApplication", docs=render(CASES["spark-operator"])))
    app["spec"]["executor"]["instances"] = "2"
    assert crd_schemas.problems(app)


# --------------------------------------------------------------------------- the two modes


def test_local_mode_is_one_statefulset_pod_with_a_read_write_once_checkpoint_and_no_spark_operator():
    docs = render()
    kinds = {d["kind"] for d in docs}
    assert "SparkApplication" not in kinds and "Role" not in kinds and "PersistentVolumeClaim" not in kinds
    sts = one("StatefulSet", docs=docs)
    assert sts["spec"]["replicas"] == 1, "one query per checkpoint"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/fencewatch"
    assert pod["automountServiceAccountToken"] is False, "local mode needs no Kubernetes API"


def _job_config(docs: list[dict], tmp_path: Path):
    """The job's Config as the container loads it: the mounted file, then the pod's environment."""
    from fencewatch.streaming.config.settings import load_config

    sts = [d for d in docs if d["kind"] == "StatefulSet"]
    container = sts[0]["spec"]["template"]["spec"]["containers"][0] if sts else \
        pod_of(one("SparkApplication", docs=docs), "driver")["spec"]["containers"][0]
    path = tmp_path / "fencewatch.yaml"
    path.write_text(one("ConfigMap", f"{RELEASE}-fencewatch-config", docs=docs)["data"]["fencewatch.yaml"])
    return load_config(file=path, environ=container_env(container, docs)), container


def test_local_mode_config_runs_spark_locally_with_its_checkpoint_on_the_claim(tmp_path):
    config, container = _job_config(render({"local.cores": "3"}), tmp_path)
    assert config.streaming.spark_master == "local[3]"
    assert config.streaming.shuffle_partitions == 6
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert any(config.streaming.checkpoint_location.startswith(m + "/") for m in mounts if m.startswith("/var"))
    assert config.streaming.spark_conf["spark.driver.memory"] == "1g"
    assert config.streaming.kafka["sasl.password"] == "job-s3cret", "credentials reach the clients from the Secret"


def test_spark_operator_mode_config_leaves_the_master_to_spark_submit(tmp_path):
    docs = render(CASES["spark-operator"])
    config, _ = _job_config(docs, tmp_path)
    assert config.streaming.spark_master == ""
    assert "StatefulSet" not in {d["kind"] for d in docs}
    claim = one("PersistentVolumeClaim", docs=docs)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "the driver and every executor write the checkpoint"
    app = one("SparkApplication", docs=docs)
    assert {v["name"]: v for v in app["spec"]["volumes"]}["checkpoint"]["persistentVolumeClaim"]["claimName"] == \
        claim["metadata"]["name"]
    log4j2 = one("ConfigMap", f"{RELEASE}-fencewatch-log4j2", docs=docs)["data"]
    assert log4j2 == {p.name: p.read_text() for p in (ROOT / "streaming" / "runtime").glob("log4j2*.properties")}


def test_an_existing_claim_replaces_the_charts():
    docs = render(CASES["spark-operator-annotations"])
    assert "PersistentVolumeClaim" not in {d["kind"] for d in docs}
    app = one("SparkApplication", docs=docs)
    assert {v["name"]: v for v in app["spec"]["volumes"]}["checkpoint"]["persistentVolumeClaim"]["claimName"] == "my-rwx"


def test_local_mode_requests_are_far_below_the_spark_operators():
    """The point of local mode: a pod a small cluster schedules (docs/deploy.md, "Helm")."""
    def gib(q: str) -> float:
        n, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", q).groups()
        return int(n) * {"Mi": 1 / 1024, "Gi": 1, "m": 1 / 1024, "g": 1}[unit]
    sts = one("StatefulSet", docs=render())
    local = gib(sts["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"])
    spec = one("SparkApplication", docs=render(CASES["spark-operator"]))["spec"]
    operator = sum(gib(spec[r]["memory"]) + gib(spec[r]["memoryOverhead"]) for r in ("driver",)) + \
        spec["executor"]["instances"] * (gib(spec["executor"]["memory"]) + gib(spec["executor"]["memoryOverhead"]))
    assert local <= 3 and operator >= 4 * local


def test_pods_run_as_the_images_non_root_user_on_a_read_only_root():
    uid = int(dockerfile_args(dockerfile_instructions())["UID"])
    for workload in ("StatefulSet", "Deployment"):
        pod = one(workload, docs=render())["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == uid and pod["securityContext"]["runAsNonRoot"] is True
        sc = pod["containers"][0]["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        tmp = next(m["name"] for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/tmp")
        assert "emptyDir" in volumes[tmp]


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("case", CASES)
def test_secrets_are_referenced_never_inlined(case):
    docs = render(CASES[case])
    assert "Secret" not in {d["kind"] for d in docs}, "the chart never holds a secret"
    credential = re.compile(r"PASSWORD|TOKEN|USER_INFO|USERNAME|SECRET")
    for cm in (d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" not in d["metadata"]["labels"]):
        assert not [k for k in cm["data"] if credential.search(k)], f"a credential in ConfigMap {cm['metadata']['name']}"
        assert "password" not in cm["data"].get("fencewatch.yaml", "")
    for doc in docs:
        for container in _containers(doc):
            for var in container.get("env", []):
                if credential.search(var["name"]):
                    assert var["valueFrom"]["secretKeyRef"]["name"] == "fencewatch", var


def test_no_sasl_means_no_credentials_required(tmp_path):
    docs = render(CASES["local-plaintext-no-scrape"])
    container = one("StatefulSet", docs=docs)["spec"]["template"]["spec"]["containers"][0]
    env = container_env(container, docs, secrets={})   # no Secret at all: starts (optional keys only)
    assert "FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD" not in env
    assert env["FENCEWATCH_STREAMING__KAFKA__SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert "FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM" not in env


# --------------------------------------------------------------------------- scraping


def _containers(doc: dict) -> list[dict]:
    if doc["kind"] == "SparkApplication":
        return [pod_of(doc, r)["spec"]["containers"][0] for r in ("driver", "executor")]
    if doc["kind"] in ("StatefulSet", "Deployment"):
        return doc["spec"]["template"]["spec"]["containers"]
    return []


def _pods(docs: list[dict]) -> list[dict]:
    """The pods the release runs (templates' metadata), the operator's driver and executor pods."""
    out = []
    for doc in docs:
        if doc["kind"] == "SparkApplication":
            out += [pod_of(doc, r) for r in ("driver", "executor")]
        elif doc["kind"] in ("StatefulSet", "Deployment"):
            out.append({"metadata": doc["spec"]["template"]["metadata"], "spec": doc["spec"]["template"]["spec"]})
    return out


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def scrape_paths(docs: list[dict], pod: dict) -> int:
    """How many ways a Prometheus finds this pod: PodMonitors selecting it, its own scrape
    annotation, and annotated Services selecting it (kubernetes_sd role: endpoints)."""
    labels = pod["metadata"].get("labels", {})
    n = sum(_matches(d["spec"]["selector"]["matchLabels"], labels) for d in docs if d["kind"] == "PodMonitor")
    n += pod["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"
    n += sum(d["kind"] == "Service" and d["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"
             and _matches(d["spec"]["selector"], labels) for d in docs)
    return n


@pytest.mark.parametrize("case", CASES)
def test_every_pod_serving_metrics_has_exactly_one_scrape_path(case):
    docs = render(CASES[case])
    mode = CASES[case].get("scrape.mode", "podMonitor")
    pods = _pods(docs)
    serving = [p for p in pods if any(port.get("name") == "metrics" for port in p["spec"]["containers"][0].get("ports", []))]
    assert len(serving) == 1 + (CASES[case].get("bridge.enabled") != "false")
    for pod in serving:
        assert scrape_paths(docs, pod) == (0 if mode == "none" else 1), pod["metadata"]["labels"]
    for pod in pods:
        if pod not in serving:
            assert scrape_paths(docs, pod) == 0, "an executor has no metrics endpoint"


def test_the_podmonitors_job_label_is_the_one_the_rules_expect():
    docs = render()
    monitor = one("PodMonitor", f"{RELEASE}-fencewatch", docs=docs)
    job_pod = next(p for p in _pods(docs) if p["metadata"]["labels"].get("app.kubernetes.io/component") == "job")
    job = job_pod["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    rules = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "rules" / "fencewatch.rules.yml").read_text())
    absent = [r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "FencewatchMonitorAbsent"]
    assert absent and all(f'job="{job}"' in e for e in absent if "job=" in e)


# --------------------------------------------------------------------------- rules and dashboards


def test_the_prometheusrule_is_the_shipped_rules_file():
    rule = one("PrometheusRule", docs=render())
    source = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "rules" / "fencewatch.rules.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    assert "PrometheusRule" not in {d["kind"] for d in render(CASES["local-plaintext-no-scrape"])}


def test_one_sidecar_configmap_per_dashboard_equal_to_its_source():
    sources = {p.name: json.loads(p.read_text()) for p in (ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json")}
    maps = [d for d in render() if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(maps) == len(sources) >= 1
    found = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1", "the sidecar's default label and value"
        (name, text), = cm["data"].items()
        found[name] = json.loads(text)
    assert found == sources
    assert not [d for d in render(CASES["local-plaintext-no-scrape"]) if "grafana_dashboard" in d["metadata"].get("labels", {})]


def test_the_charts_files_are_links_to_the_sources_not_copies():
    """One source of truth: files/ links to dashboards/ and streaming/runtime (Helm follows them)."""
    files = CHART / "files"
    for link, target in {"dashboards": ROOT / "dashboards" / "grafana" / "dashboards",
                         "rules": ROOT / "dashboards" / "prometheus" / "rules"}.items():
        assert (files / link).is_symlink() and (files / link).resolve() == target.resolve()
    for p in (files / "log4j2").iterdir():
        assert p.is_symlink() and p.resolve() == (ROOT / "streaming" / "runtime" / p.name).resolve()


def test_the_packaged_chart_holds_the_linked_files_and_renders_the_same(tmp_path):
    """`helm package` stores the links' contents: a chart installed from its .tgz alone (no
    checkout) renders the same objects."""
    done = run_helm("package", str(CHART), "-d", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (tgz,) = tmp_path.glob("fencewatch-*.tgz")
    done = run_helm("template", RELEASE, str(tgz), "--namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr
    assert [d for d in yaml.safe_load_all(done.stdout) if d] == render()


@pytest.mark.parametrize("case", ["local", "spark-operator"])
def test_the_job_containers_own_command_accepts_its_config(case, tmp_path):
    """The container's arguments and environment as rendered, run through fencewatch's CLI with
    --print-config (the config is loaded and validated; nothing starts)."""
    import subprocess as sp
    import sys

    docs = render(CASES[case])
    _, container = _job_config(docs, tmp_path)
    args = container.get("args") or one("SparkApplication", docs=docs)["spec"]["arguments"]
    path = tmp_path / "fencewatch.yaml"   # written by _job_config: the mounted file
    argv = [a if a != "/etc/fencewatch/fencewatch.yaml" else str(path) for a in args]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **container_env(container, docs)}
    done = sp.run([sys.executable, "-m", "fencewatch.streaming.cli", *argv, "--print-config"],
                  capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)
    assert printed["streaming"]["spark_master"] == ("local[2]" if case == "local" else "")
    assert "job-s3cret" not in done.stdout, "--print-config redacts the Secret's password"


# --------------------------------------------------------------------------- the cluster's name


def test_the_cluster_name_reaches_the_job_and_the_bridge_alike():
    """Two releases on two clusters stay apart only if both pods name the same cluster (contract 1)."""
    docs = render({"kafka.cluster": "eu-1"})
    kafka = one("ConfigMap", f"{RELEASE}-fencewatch-kafka", docs=docs)
    assert kafka["data"]["FENCEWATCH_STREAMING__CLUSTER"] == "eu-1"
    bridge = next(p for p in _pods(docs) if p["spec"]["containers"][0]["name"] == "bridge")
    args = bridge["spec"]["containers"][0]["args"]
    assert "--cluster=$(FENCEWATCH_STREAMING__CLUSTER)" in args
    assert any(ref.get("configMapRef", {}).get("name") == kafka["metadata"]["name"]
               for ref in bridge["spec"]["containers"][0]["envFrom"])
