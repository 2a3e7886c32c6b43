"""What Kubernetes and the spark-operator make of the rendered manifests, for the deploy tests:
the Pod the operator builds for a SparkApplication's driver or executor, and a container's
environment and arguments as the kubelet resolves them (ConfigMaps, Secrets, ``$(VAR)``).
Written from Kubernetes' documented rules; no cluster runs here."""
from __future__ import annotations

import base64
import copy
import re

# Spark's name for the driver container, which a pod template's container is merged into
# (Spark's Constants.DEFAULT_DRIVER_CONTAINER_NAME).
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
# Test values for the Secret `fencewatch` that the user creates (docs/deploy.md).
SECRET_VALUES = {"job-sasl-username": "fencewatch", "job-sasl-password": "job-s3cret",
                 "bridge-sasl-username": "fencewatch-bridge", "bridge-sasl-password": "bridge-s3cret",
                 "grafana-token": "glsa_token", "schema-registry-user-info": "sr-user:sr-s3cret"}


def pod_of(app: dict, role: str) -> dict:
    """The Pod the operator builds for the driver or an executor, from the fields it copies."""
    spec = app["spec"]
    part = spec[role]
    container = {"name": DRIVER_CONTAINER if role == "driver" else EXECUTOR_CONTAINER,
                 "image": part.get("image", spec["image"]),
                 "env": part.get("env", []),
                 "envFrom": part.get("envFrom", []),
                 "volumeMounts": part.get("volumeMounts", []),
                 "ports": part.get("ports", []),
                 "securityContext": part.get("securityContext", {})}
    container = {k: v for k, v in container.items() if v != []}
    template = copy.deepcopy(part.get("template", {"spec": {"containers": []}}))
    merged = next((c for c in template["spec"]["containers"] if c["name"] == container["name"]), None)
    if merged is not None:
        template["spec"]["containers"].remove(merged)
        container = {**merged, **container}
    pod_spec = {**template["spec"], "containers": [container, *template["spec"]["containers"]],
                "volumes": spec.get("volumes", []), "securityContext": part.get("podSecurityContext", {})}
    if part.get("serviceAccount"):
        pod_spec["serviceAccountName"] = part["serviceAccount"]
    labels = {**part.get("labels", {}), "spark-role": role}  # the operator's own label
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"fencewatch-{role}", "namespace": app["metadata"]["namespace"],
                         "labels": labels, "annotations": part.get("annotations", {})},
            "spec": pod_spec}


def _data(docs: list[dict], kind: str, name: str, secrets: dict[str, dict[str, str]]) -> dict[str, str] | None:
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            if kind == "Secret":
                return {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()} | \
                       dict(d.get("stringData") or {})
            return dict(d.get("data") or {})
    if kind == "Secret":
        return secrets.get(name)
    return None


def container_env(container: dict, docs: list[dict], secrets: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """The container's environment as the kubelet builds it: ``envFrom`` first, then ``env``
    (later wins); ConfigMaps and Secrets from the rendered ``docs``, Secrets not rendered (the
    user creates them) from ``secrets`` (default: ``fencewatch`` = :data:`SECRET_VALUES`).
    A missing source or key fails unless marked optional, as the kubelet refuses to start it."""
    secrets = {"fencewatch": SECRET_VALUES} if secrets is None else secrets
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        kind, ref = ("ConfigMap", source["configMapRef"]) if "configMapRef" in source else ("Secret", source["secretRef"])
        data = _data(docs, kind, ref["name"], secrets)
        assert data is not None or ref.get("optional"), f"envFrom: no {kind} {ref['name']}"
        env.update({source.get("prefix", "") + k: v for k, v in (data or {}).items()})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
            continue
        source = var["valueFrom"]
        kind, ref = ("ConfigMap", source["configMapKeyRef"]) if "configMapKeyRef" in source \
            else ("Secret", source["secretKeyRef"])
        data = _data(docs, kind, ref["name"], secrets) or {}
        if ref["key"] in data:
            env[var["name"]] = data[ref["key"]]
        else:
            assert ref.get("optional"), f"{var['name']}: {kind} {ref['name']} has no key {ref['key']}"
    return env


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in args and env values (``$$`` escapes; unknown stays)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)
