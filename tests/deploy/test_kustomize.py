"""deploy/kubernetes/kustomization.yaml is the one place a platform team changes: the image, the
Kafka settings and the secrets reach the job (SparkApplication) and the bridge alike, through
kustomize itself (``kustomize edit``, an overlay), rendered and read back as the kubelet would."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import yaml

import test_kubernetes as k8s
from deploy_files import KUBERNETES, ROOT, build, kustomize, one, pyproject, rendered
from k8s_objects import pod_of

PLACEHOLDER = "fencewatch"  # the image name in the manifests, replaced by `images`


def _images(docs: list[dict]) -> dict[str, set[str]]:
    app = one("SparkApplication", docs=docs)["spec"]
    bridge = one("Deployment", "fencewatch-bridge", docs=docs)["spec"]["template"]["spec"]["containers"]
    return {"job": {app["image"], *(app[r]["image"] for r in ("driver", "executor") if "image" in app[r])},
            "bridge": {c["image"] for c in bridge}}


def _copy_base(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    shutil.copytree(KUBERNETES, base, ignore=shutil.ignore_patterns("strimzi"))
    return base


def test_the_default_image_is_this_release():
    version = pyproject()["project"]["version"]
    assert _images(rendered()) == {"job": {f"fencewatch:{version}"}, "bridge": {f"fencewatch:{version}"}}


def test_kustomize_edit_set_image_retags_the_job_and_the_bridge(tmp_path):
    base = _copy_base(tmp_path)
    done = subprocess.run([kustomize(), "edit", "set", "image", f"{PLACEHOLDER}=registry.test/team/fencewatch:9.9.9"],
                          cwd=base, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _images(build(base)) == {"job": {"registry.test/team/fencewatch:9.9.9"},
                                    "bridge": {"registry.test/team/fencewatch:9.9.9"}}


def test_without_the_image_field_specs_the_job_would_keep_its_image(tmp_path):
    """Negative control: kustomize alone does not know a SparkApplication's image field."""
    base = _copy_base(tmp_path)
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    kust.pop("configurations")
    (base / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    images = _images(build(base))
    assert images["job"] == {PLACEHOLDER} and images["bridge"] != {PLACEHOLDER}


def _overlay(tmp_path: Path) -> list[dict]:
    """A platform team's overlay: its registry, its cluster and topic names, its Secret."""
    _copy_base(tmp_path)
    overlay = tmp_path / "prod"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../base"],
        "images": [{"name": PLACEHOLDER, "newName": "registry.corp/kafka/fencewatch", "newTag": "0.2.0"}],
        "configMapGenerator": [{"name": "fencewatch-kafka", "namespace": "fencewatch", "behavior": "merge", "literals": [
            "FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS=kafka-0.prod:9096,kafka-1.prod:9096",
            "FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM=SCRAM-SHA-256",
            "FENCEWATCH_STREAMING__HEARTBEATS_TOPIC=ops.fencewatch.heartbeats",
            "FENCEWATCH_STREAMING__OFFSETS_TOPIC=ops.fencewatch.offsets",
            "FENCEWATCH_SINKS__ALERTS_TOPIC=ops.fencewatch.alerts"]}],
        "secretGenerator": [{"name": "fencewatch", "namespace": "fencewatch", "literals": [
            "job-sasl-username=svc-fencewatch", "job-sasl-password=prod-job-pw",
            "bridge-sasl-username=svc-fencewatch-bridge", "bridge-sasl-password=prod-bridge-pw"]}],
    }))
    return build(overlay)


def test_an_overlay_sets_kafka_and_secrets_once_for_the_job_and_the_bridge(tmp_path):
    from fencewatch.streaming.config.settings import load_config

    docs = _overlay(tmp_path)
    secret = one("Secret", "fencewatch", docs=docs)
    assert secret["metadata"]["name"] != "fencewatch", "generated: hashed, and the references follow"
    job = k8s.job_config(docs, tmp=tmp_path)
    args, env = k8s.bridge_args(docs, secrets={})
    bridge = load_config(environ=env)
    assert job.streaming.bootstrap_servers == args.bootstrap_servers == "kafka-0.prod:9096,kafka-1.prod:9096"
    assert job.streaming.kafka["sasl.mechanism"] == bridge.streaming.kafka["sasl.mechanism"] == "SCRAM-SHA-256"
    assert job.streaming.kafka["security.protocol"] == "SASL_SSL", "the base's, merged"
    assert (job.streaming.heartbeats_topic, job.streaming.offsets_topic) == (args.heartbeats_topic, args.offsets_topic) \
        == ("ops.fencewatch.heartbeats", "ops.fencewatch.offsets")
    assert job.sinks.alerts_topic == "ops.fencewatch.alerts"
    assert (job.streaming.kafka["sasl.username"], job.streaming.kafka["sasl.password"]) == ("svc-fencewatch", "prod-job-pw")
    assert (bridge.streaming.kafka["sasl.username"], bridge.streaming.kafka["sasl.password"]) == \
        ("svc-fencewatch-bridge", "prod-bridge-pw")
    assert job.sinks.grafana_token is None, "optional keys may be absent"
    assert _images(docs) == {"job": {"registry.corp/kafka/fencewatch:0.2.0"}, "bridge": {"registry.corp/kafka/fencewatch:0.2.0"}}
    driver = pod_of(one("SparkApplication", docs=docs), "driver")["spec"]["containers"][0]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in driver["env"] if "secretKeyRef" in e.get("valueFrom", {})} \
        == {secret["metadata"]["name"]}
    assert base64.b64decode(secret["data"]["job-sasl-password"]).decode() == "prod-job-pw"


def _documented_secret_keys() -> tuple[set[str], set[str]]:
    """(every key, the optional ones) of the Secret, from docs/deploy.md's table of its keys."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("### The Secret `fencewatch`"):]
    section = section[:section.index("\n#", 1)]
    rows = re.findall(r"^\| `([a-z-]+)` \|.*\| (yes|no) \|$", section, re.M)
    assert rows, "docs/deploy.md lists the Secret's keys"
    return {k for k, _ in rows}, {k for k, required in rows if required == "no"}


def test_every_secret_key_a_pod_reads_is_documented_and_only_documented_optional_ones_may_be_missing():
    keys, optional = _documented_secret_keys()
    refs = []
    for container in (pod_of(one("SparkApplication"), "driver")["spec"]["containers"][0],
                      one("Deployment", "fencewatch-bridge")["spec"]["template"]["spec"]["containers"][0]):
        refs += [e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
    assert {r["name"] for r in refs} == {"fencewatch"}, "one Secret"
    assert {r["key"] for r in refs} == keys
    assert {r["key"] for r in refs if r.get("optional")} == optional
