"""deploy/kubernetes: valid against Kubernetes' own schemas, and wired to each other and to the image.

Built-in kinds are checked with ``kubernetes-validate`` (Kubernetes' OpenAPI schemas, strict: an
unknown field fails). The ``SparkApplication`` is a custom resource whose schema is not among
Kubernetes' and whose CRD we may not copy into this repository, so its own fields are checked
against the spark-operator's API types (``api/v1beta2/sparkapplication_types.go``, kubeflow/
spark-operator at 38082f3, Aug 2026: the json names listed below), and its Kubernetes parts
(volumes, env, mounts, security contexts, probes) are validated by Kubernetes' schemas as the
Pod the operator makes of them. No cluster runs here: what the operator and the kubelet do at
run time is not exercised.
"""
from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from deploy_files import KUBERNETES, ROOT, dockerfile_args, dockerfile_instructions, manifests, one, pyproject

K8S = kubernetes_validate.latest_version()
CUSTOM_KINDS = {"SparkApplication", "Kustomization"}

# spark-operator api/v1beta2 json field names (SparkApplicationSpec, DriverSpec, ExecutorSpec and
# the SparkPodSpec both inline, RestartPolicy), see the module docstring for the source.
SPARK_POD_SPEC = {
    "template", "cores", "coreLimit", "memory", "memoryLimit", "memoryOverhead", "gpu", "image", "configMaps",
    "secrets", "env", "envVars", "envFrom", "envSecretKeyRefs", "labels", "annotations", "volumeMounts",
    "affinity", "tolerations", "podSecurityContext", "securityContext", "schedulerName", "sidecars",
    "initContainers", "hostNetwork", "nodeSelector", "dnsConfig", "terminationGracePeriodSeconds",
    "serviceAccount", "hostAliases", "shareProcessNamespace"}
SPEC_FIELDS = {
    "suspend", "type", "sparkVersion", "mode", "proxyUser", "image", "imagePullPolicy", "imagePullSecrets",
    "mainClass", "mainApplicationFile", "arguments", "sparkConf", "hadoopConf", "sparkConfigMap",
    "hadoopConfigMap", "volumes", "driver", "executor", "deps", "restartPolicy", "nodeSelector",
    "failureRetries", "retryInterval", "pythonVersion", "memoryOverheadFactor", "monitoring", "batchScheduler",
    "timeToLiveSeconds", "batchSchedulerOptions", "sparkUIOptions", "driverIngressOptions", "dynamicAllocation",
    "driverPodDisruptionBudget"}
SPEC_REQUIRED = {"type", "sparkVersion", "mainApplicationFile", "driver", "executor"}
DRIVER_FIELDS = SPARK_POD_SPEC | {"podName", "coreRequest", "javaOptions", "lifecycle", "kubernetesMaster",
                                  "serviceAnnotations", "serviceLabels", "ports", "priorityClassName"}
EXECUTOR_FIELDS = SPARK_POD_SPEC | {"instances", "coreRequest", "javaOptions", "lifecycle", "deleteOnTermination",
                                    "ports", "priorityClassName"}
RESTART_FIELDS = {"type", "onSubmissionFailureRetries", "onFailureRetries", "onSubmissionFailureRetryInterval",
                  "onFailureRetryInterval"}
RESTART_TYPES = {"Never", "Always", "OnFailure"}  # RestartPolicyType constants
APP_TYPES = {"Java", "Scala", "Python", "R"}      # SparkApplicationType constants
PORT_FIELDS = {"name", "protocol", "containerPort"}
# Spark's name for the driver container, which a pod template's container is merged into
# (Spark's Constants.DEFAULT_DRIVER_CONTAINER_NAME).
DRIVER_CONTAINER = "spark-kubernetes-driver"


def _docs():
    return [(name, d) for name, docs in manifests().items() for d in docs]


def _app() -> dict:
    return one("SparkApplication")


# --------------------------------------------------------------------------- Kubernetes' schemas


@pytest.mark.parametrize("name,doc", [(n, d) for n, d in _docs() if d["kind"] not in CUSTOM_KINDS],
                         ids=lambda v: v if isinstance(v, str) else f"{v['kind']}/{v['metadata']['name']}")
def test_manifest_is_valid_for_kubernetes(name, doc):
    kubernetes_validate.validate(doc, K8S, strict=True)


def test_the_validator_would_catch_a_misspelt_field():
    """Negative control: strict validation rejects an unknown field, so the test above can fail."""
    bridge = copy.deepcopy(one("Deployment", "fencewatch-bridge"))
    bridge["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bridge, K8S, strict=True)


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_every_namespaced_object_lives_in_the_namespace():
    ns = one("Namespace")["metadata"]["name"]
    for name, doc in _docs():
        if doc["kind"] not in ("Namespace", "Kustomization"):
            assert doc["metadata"].get("namespace") == ns, f"{name}: {doc['kind']}"


# --------------------------------------------------------------------------- the SparkApplication


def _pod_of(app: dict, role: str) -> dict:
    """The Pod the operator builds for the driver or an executor, from the fields it copies."""
    spec = app["spec"]
    part = spec[role]
    container = {"name": DRIVER_CONTAINER if role == "driver" else "spark-kubernetes-executor",
                 "image": part.get("image", spec["image"]),
                 "env": part.get("env", []),
                 "volumeMounts": part.get("volumeMounts", []),
                 "ports": part.get("ports", []),
                 "securityContext": part.get("securityContext", {})}
    template = copy.deepcopy(part.get("template", {"spec": {"containers": []}}))
    merged = next((c for c in template["spec"]["containers"] if c["name"] == container["name"]), None)
    if merged is not None:
        template["spec"]["containers"].remove(merged)
        container = {**merged, **container}
    pod_spec = {**template["spec"], "containers": [container, *template["spec"]["containers"]],
                "volumes": spec.get("volumes", []), "securityContext": part.get("podSecurityContext", {})}
    if part.get("serviceAccount"):
        pod_spec["serviceAccountName"] = part["serviceAccount"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"fencewatch-{role}", "namespace": app["metadata"]["namespace"],
                         "labels": part.get("labels", {}), "annotations": part.get("annotations", {})},
            "spec": pod_spec}


def test_spark_application_fields_are_the_operators():
    app = _app()
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    assert set(spec) <= SPEC_FIELDS, set(spec) - SPEC_FIELDS
    assert SPEC_REQUIRED <= set(spec)
    assert spec["type"] in APP_TYPES and spec["type"] == "Python"
    assert spec["mode"] == "cluster"
    assert set(spec["driver"]) <= DRIVER_FIELDS, set(spec["driver"]) - DRIVER_FIELDS
    assert set(spec["executor"]) <= EXECUTOR_FIELDS, set(spec["executor"]) - EXECUTOR_FIELDS
    assert set(spec["restartPolicy"]) <= RESTART_FIELDS and spec["restartPolicy"]["type"] in RESTART_TYPES
    assert spec["restartPolicy"]["type"] == "Always", "a streaming query is restarted from its checkpoint"
    for port in spec["driver"].get("ports", []):
        assert set(port) == PORT_FIELDS, "Port needs name, protocol and containerPort"
    assert all(isinstance(v, str) for v in spec["sparkConf"].values()), "sparkConf is map[string]string"
    for role in ("driver", "executor"):
        assert isinstance(spec[role]["cores"], int), "cores is an int32"
        assert re.fullmatch(r"\d+[kmg]", spec[role]["memory"]), "Spark memory syntax (512m, 4g)"
    assert spec["executor"]["instances"] >= 1


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_the_pods_the_operator_makes_are_valid_for_kubernetes(role):
    kubernetes_validate.validate(_pod_of(_app(), role), K8S, strict=True)


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_pods_run_as_the_images_non_root_user_on_a_read_only_root(role):
    pod = _pod_of(_app(), role)
    uid = int(dockerfile_args(dockerfile_instructions())["UID"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == uid
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert set(mounts.values()) <= set(volumes), "every mount names a volume"
    assert "emptyDir" in volumes[mounts["/tmp"]], "Spark's scratch space and Ivy's cache are writable"
    assert _app()["spec"]["sparkConf"]["spark.jars.ivy"].startswith("/tmp/")


def _job_config(environ: dict | None = None):
    from fencewatch.streaming.config.settings import load_config

    text = one("ConfigMap", "fencewatch")["data"]["fencewatch.yaml"]
    path = Path(pytest.importorskip("tempfile").mkdtemp()) / "fencewatch.yaml"
    path.write_text(text)
    return load_config(file=path, environ=environ or {})


def test_the_config_map_is_a_valid_fencewatch_config_and_the_secret_reaches_the_kafka_clients():
    driver = _pod_of(_app(), "driver")["spec"]["containers"][0]
    secret_env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in driver["env"] if "valueFrom" in e}
    assert secret_env, "the SASL password comes from a Secret"
    cfg = _job_config({name: "s3cret" for name in secret_env})
    assert cfg.streaming.kafka["sasl.password"] == "s3cret"
    assert cfg.streaming.kafka["sasl.username"] and cfg.streaming.kafka["security.protocol"] == "SASL_SSL"
    assert "password" not in one("ConfigMap", "fencewatch")["data"]["fencewatch.yaml"]
    assert cfg.streaming.spark_master == "", "the master is the operator's, not local[2]"


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_checkpoint_is_on_the_shared_claim_in_every_pod(role):
    cfg = _job_config()
    pod = _pod_of(_app(), role)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    holding = [m for m in mounts if cfg.streaming.checkpoint_location.startswith(m["mountPath"] + "/")]
    assert holding, f"{role}: checkpoint {cfg.streaming.checkpoint_location} is on no mount"
    claim = volumes[holding[0]["name"]]["persistentVolumeClaim"]["claimName"]
    pvc = one("PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "driver and executors write the checkpoint"


def test_driver_config_file_is_mounted_where_the_arguments_read_it():
    app = _app()
    from fencewatch.streaming.cli import build_parser

    args = build_parser(app["spec"]["arguments"]).parse_args(app["spec"]["arguments"])
    assert args.command == "run"
    mounts = _pod_of(app, "driver")["spec"]["containers"][0]["volumeMounts"]
    config_mount = next(m for m in mounts if args.config.startswith(m["mountPath"] + "/"))
    volume = next(v for v in app["spec"]["volumes"] if v["name"] == config_mount["name"])
    cm = one("ConfigMap", volume["configMap"]["name"])
    assert Path(args.config).name in cm["data"]
    main = app["spec"]["mainApplicationFile"]
    copied = [i.args for i in dockerfile_instructions() if i.keyword == "COPY" and "fencewatch_main.py" in i.args]
    assert main == "local://" + copied[0].split()[-1], "the main file is the one the image holds"


def test_probes_and_scrape_point_at_the_metrics_port_the_job_serves():
    cfg = _job_config()
    port = cfg.sinks.metrics_port
    assert cfg.sinks.metrics_host == "0.0.0.0", "reachable from the kubelet and Prometheus"
    pod = _pod_of(_app(), "driver")
    container = pod["spec"]["containers"][0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": port}, probe
    assert {"name": "metrics", "protocol": "TCP", "containerPort": port} in container["ports"]
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/port"] == str(port)
    service = one("Service", "fencewatch-metrics")
    labels = {**pod["metadata"]["labels"], "spark-role": "driver"}  # the operator adds spark-role
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["port"] == port
    exec_labels = {**_pod_of(_app(), "executor")["metadata"]["labels"], "spark-role": "executor"}
    assert not service["spec"]["selector"].items() <= exec_labels.items(), "executors serve no metrics"


def test_driver_runs_with_the_service_account_the_role_binding_grants():
    sa = _app()["spec"]["driver"]["serviceAccount"]
    binding = one("RoleBinding")
    assert {"kind": "ServiceAccount", "name": sa, "namespace": "fencewatch"} in binding["subjects"]
    role = one("Role", binding["roleRef"]["name"])
    pods = next(r for r in role["rules"] if "pods" in r["resources"])
    assert {"create", "delete", "watch", "list", "get"} <= set(pods["verbs"]), "the driver manages executors"


def test_kafka_connector_matches_spark_scala_and_the_image():
    """spark-sql-kafka-0-10 must be the exact Spark version (and Scala) the image runs."""
    import pyspark

    app = _app()
    spark_version = app["spec"]["sparkVersion"]
    m = re.fullmatch(r"org\.apache\.spark:spark-sql-kafka-0-10_(2\.1[23]):(\S+)",
                     app["spec"]["sparkConf"]["spark.jars.packages"])
    assert m, "the JVM Kafka connector comes through spark.jars.packages"
    scala, connector = m.groups()
    assert connector == spark_version == dockerfile_args(dockerfile_instructions())["SPARK_VERSION"]
    pin = next(Requirement(d) for d in pyproject()["project"]["dependencies"] if d.startswith("pyspark"))
    assert Version(spark_version) in pin.specifier
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")]
    assert jars and jars[0].startswith(f"spark-core_{scala}-"), "pyspark's jars are built for this Scala"
    assert "spark-submit" in (ROOT / "deploy" / "spark-submit.sh").read_text()


# --------------------------------------------------------------------------- the bridge


def test_bridge_deployment_runs_a_command_the_cli_accepts_with_its_secret_mounted():
    from fencewatch.streaming.cli import build_parser

    bridge = one("Deployment", "fencewatch-bridge")
    assert bridge["spec"]["replicas"] == 1, "two bridges would write every event twice"
    pod = bridge["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = build_parser(container["args"]).parse_args(container["args"])
    assert args.command == "bridge" and args.bootstrap_servers
    assert args.bootstrap_servers == _job_config().streaming.bootstrap_servers, "one cluster"
    mount = next(m for m in container["volumeMounts"] if args.command_config.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    items = {i["path"]: i["key"] for i in volume["secret"]["items"]}
    assert Path(args.command_config).name in items
    assert not any("password" in a for a in container["args"]), "no secret on the command line"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"] == _app()["spec"]["image"], "one image for every role"
