"""Every pod of the raw manifests that serves metrics is scraped one way, in every variant we
ship (deploy/kubernetes and deploy/kubernetes with each of its components). Two scrape paths to
one pod make two series for each of its metrics, and every `sum by` threshold of the shipped
rules then fires at half the real value: the driver once had three (its pod's prometheus.io
annotations, an annotated Service selecting it, and a PodMonitor)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from deploy_files import KUBERNETES, build
from k8s_objects import pod_of

COMPONENTS = KUBERNETES / "components"


def _component_dirs() -> list[Path]:
    return sorted(p.parent for p in COMPONENTS.glob("*/kustomization.yaml")
                  if yaml.safe_load(p.read_text()).get("kind") == "Component")


def _variant(tmp_path: Path, component: Path | None) -> list[dict]:
    """The base as `kubectl apply -k` renders it, or an overlay of the base with one component, as
    a user's own overlay would write it (docs: deploy/README.md)."""
    if component is None:
        return build(KUBERNETES)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize takes relative paths only
        "resources": [os.path.relpath(KUBERNETES, overlay)], "components": [os.path.relpath(component, overlay)]}))
    return build(overlay)


VARIANTS = {"base": None, **{f"components/{p.name}": p for p in _component_dirs()}}


def _pods(docs: list[dict]) -> list[dict]:
    """The pods the workloads make: the operator's driver and executor, a Deployment's template."""
    out = []
    for doc in docs:
        if doc["kind"] == "SparkApplication":
            out += [pod_of(doc, role) for role in ("driver", "executor")]
        elif doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            template = doc["spec"]["template"]
            out.append({"metadata": {**template["metadata"], "namespace": doc["metadata"]["namespace"]},
                        "spec": template["spec"]})
    return out


def _selects(selector: dict | None, labels: dict) -> bool:
    """A label selector's matchLabels (or a Service's plain map) against a pod's labels; an empty
    or missing selector selects nothing here (a Service without one has no endpoints)."""
    selector = selector or {}
    if "matchLabels" in selector or "matchExpressions" in selector:
        assert not selector.get("matchExpressions"), "matchExpressions: extend this test"
        selector = selector.get("matchLabels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _same_namespace(monitor: dict, pod: dict) -> bool:
    wanted = (monitor["spec"].get("namespaceSelector") or {})
    if wanted.get("any"):
        return True
    names = wanted.get("matchNames") or [monitor["metadata"].get("namespace")]
    return pod["metadata"].get("namespace") in names


def scrape_paths(docs: list[dict], pod: dict) -> list[str]:
    """Every way a Prometheus finds this pod: its own prometheus.io/scrape annotation (kubernetes_sd
    role: pod), annotated Services selecting it (role: endpoints), PodMonitors selecting it, and
    ServiceMonitors selecting a Service that selects it."""
    labels = pod["metadata"].get("labels", {})
    namespace = pod["metadata"].get("namespace")
    found = []
    if pod["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true":
        found.append("pod annotation")
    services = [d for d in docs if d["kind"] == "Service" and d["metadata"].get("namespace") == namespace
                and _selects(d["spec"].get("selector"), labels)]
    found += [f"Service {s['metadata']['name']} annotation" for s in services
              if s["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"]
    found += [f"PodMonitor {d['metadata']['name']}" for d in docs
              if d["kind"] == "PodMonitor" and _same_namespace(d, pod) and _selects(d["spec"]["selector"], labels)]
    found += [f"ServiceMonitor {m['metadata']['name']} via {s['metadata']['name']}"
              for m in docs if m["kind"] == "ServiceMonitor" for s in services
              if _same_namespace(m, pod) and _selects(m["spec"]["selector"], s["metadata"].get("labels", {}))]
    return found


def _serves_metrics(pod: dict) -> bool:
    return any(port.get("name") == "metrics" for c in pod["spec"]["containers"] for port in c.get("ports", []))


def test_the_annotations_component_is_shipped():
    """The alternative for a Prometheus without the operator exists, so the loop below covers it."""
    assert "components/scrape-annotations" in VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pod_serving_metrics_has_exactly_one_scrape_path(variant, tmp_path):
    docs = _variant(tmp_path, VARIANTS[variant])
    pods = _pods(docs)
    serving = [p for p in pods if _serves_metrics(p)]
    assert {p["metadata"]["labels"]["app.kubernetes.io/name"] for p in serving} == {"fencewatch", "fencewatch-bridge"}
    for pod in serving:
        paths = scrape_paths(docs, pod)
        assert len(paths) == 1, f"{variant}: {pod['metadata']['labels']} is scraped by {paths or 'nothing'}"
    for pod in pods:
        if not _serves_metrics(pod):
            assert scrape_paths(docs, pod) == [], f"{variant}: {pod['metadata']['labels']} serves no metrics"


def test_the_counter_sees_each_kind_of_path(tmp_path):
    """Negative control: a pod with all four paths counts four, so a count of one means one."""
    pod = {"metadata": {"namespace": "n", "labels": {"app": "x"}, "annotations": {"prometheus.io/scrape": "true"}},
           "spec": {"containers": [{"ports": [{"name": "metrics"}]}]}}
    service = {"kind": "Service", "metadata": {"name": "s", "namespace": "n", "labels": {"svc": "x"},
                                               "annotations": {"prometheus.io/scrape": "true"}},
               "spec": {"selector": {"app": "x"}}}
    docs = [service,
            {"kind": "PodMonitor", "metadata": {"name": "p", "namespace": "n"}, "spec": {"selector": {"matchLabels": {"app": "x"}}}},
            {"kind": "ServiceMonitor", "metadata": {"name": "m", "namespace": "n"}, "spec": {"selector": {"matchLabels": {"svc": "x"}}}},
            {"kind": "PodMonitor", "metadata": {"name": "elsewhere", "namespace": "other"},
             "spec": {"selector": {"matchLabels": {"app": "x"}}}}]
    assert len(scrape_paths(docs, pod)) == 4


def test_the_annotations_point_at_the_port_and_path_each_pod_serves(tmp_path):
    docs = _variant(tmp_path, VARIANTS["components/scrape-annotations"])
    assert not [d for d in docs if d["kind"] in ("PodMonitor", "ServiceMonitor")], "the operator's path is gone"
    assert "PrometheusRule" in {d["kind"] for d in docs}, "only the scrape path changes"
    for pod in filter(_serves_metrics, _pods(docs)):
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", []) if p["name"] == "metrics"}
        notes = pod["metadata"]["annotations"]
        assert (notes["prometheus.io/port"], notes["prometheus.io/path"]) == (str(ports.pop()), "/metrics"), notes


def test_the_objects_the_component_patches_stay_valid(tmp_path):
    """The patched SparkApplication against the spark-operator's CRD, the patched Deployment
    against Kubernetes' schema (strict: a misplaced annotations map is an unknown field)."""
    import kubernetes_validate

    import crd_schemas

    docs = _variant(tmp_path, VARIANTS["components/scrape-annotations"])
    patched = [d for d in docs if d["kind"] in ("SparkApplication", "Deployment")]
    assert len(patched) == 2
    for doc in patched:
        if (doc["apiVersion"], doc["kind"]) in crd_schemas.stored():
            assert crd_schemas.problems(doc) == []
        else:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
