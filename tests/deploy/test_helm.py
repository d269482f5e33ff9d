"""deploy/helm/podgpu with the real Helm: `helm lint --strict`, and `helm template` over a values
matrix, each rendering checked as the kustomize renders are (tests/deploy/test_manifests.py,
test_compose.py, test_operator_phases.py): the Kubernetes schemas of two minors, strict; the
ServiceMonitor against the vendored prometheus-operator CRD; one DaemonSet; RBAC naming the
ServiceAccount the pods run as; the metrics port open in the NetworkPolicy; the ServiceMonitor's
scheme matching TLS; scheduling in every GPU Operator phase. values.schema.json refuses a wrong
value naming it; the chart's web config is one podgpu loads; the defaults' pod spec starts a
working exporter (tests/deploy/contract.py); the release's package names its image by digest.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from podgpu.config.serve import parse_serve_args
from podgpu.http.webconfig import parse_web_config
from tests.conftest import FIXTURES
from tests.deploy.contract import prepare
from tests.deploy.helmchart import CHART, chart, helm, prerender, template
from tests.deploy.render import CHECKOV, ROOT, container, one, render, validate_strict
from tests.deploy.test_manifests import (
    CHECKOV_SKIPS,
    K8S_VERSIONS,
    servicemonitor_validator,
)
from tests.deploy.test_operator_phases import (
    NO_OPERATOR,
    OPERATORS,
    expected,
    phases,
    schedules,
    waited_for,
)
from tests.deploy.test_startup_contract import get, series, started_beside_train, wait_until
from tests.deploy.test_startup_contract import kube_api as startup_kube_api

CW = {"enabled": True, "clusterName": "my-cluster", "region": "us-east-1"}
ROLE = "arn:aws:iam::111122223333:role/podgpu-cloudwatch"
CSV = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
PEM = {"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
       "key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"}
DCGM_USUAL: dict[str, Any] = {  # what a dcgm-exporter chart user sets, under that chart's names
    "serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "10s",
                       "honorLabels": False, "additionalLabels": {"release": "prom"},
                       "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                        "targetLabel": "nodename", "action": "replace"}],
                       "metricRelabelings": [{"action": "labeldrop", "regex": "DCGM_FI_DRIVER_VERSION"}]},
    "tolerations": [{"operator": "Exists"}],
    "nodeSelector": {"node-pool": "gpu"},
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                  "limits": {"cpu": "200m", "memory": "512Mi"}},
    "extraEnv": [{"name": "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "value": "device-name"}],
    "arguments": ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv"],
    "kubernetes": {"enablePodLabels": True, "enablePodUID": True,
                   "podLabelAllowlistRegex": ["^app$", "^team$"]},
    "kubernetesDRA": {"enabled": True},
    "podAnnotations": {"team": "ml"},
    "podLabels": {"cost-center": "gpu"},
    "priorityClassName": "gpu-critical",
    "kubeletPath": "/data/kubelet/pod-resources",
    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                          "labelSelector": {"matchLabels": {"a": "b"}}}}]}},
}
kube_api = startup_kube_api  # the pod API stand-in fixture of the start-up contract tests
ALL_ON = {
    "serviceMonitor": {"enabled": True},
    "tlsServerConfig": {"enabled": True},
    "basicAuth": {"users": {"prometheus": "s3cret", "alice": "other"}},
    "customMetrics": CSV,
    "cloudwatch": {**CW, "containerInsights": {"enabled": True}},
    "gpuOperator": {"client": True},
}
MATRIX: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (values, release, namespace)
    "defaults": ({}, "podgpu", "podgpu"),
    "servicemonitor": ({"serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "tls-generated": ({"tlsServerConfig": {"enabled": True},
                       "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "tls-inline": ({"tlsServerConfig": {"enabled": True, **PEM},
                    "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "tls-existing-secret": ({"tlsServerConfig": {"enabled": True, "existingSecret": "my-tls"},
                             "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "web-config-secret": ({"tlsServerConfig": {"enabled": True},
                           "webConfig": {"existingSecret": "podgpu-web-config"},
                           "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "basic-auth": ({"basicAuth": {"users": {"prometheus": "s3cret"}},
                    "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "tls-basic-auth": ({"tlsServerConfig": {"enabled": True, "clientAuthType":
                                            "VerifyClientCertIfGiven"},
                        "basicAuth": {"users": {"prometheus": "s3cret"}},
                        "serviceMonitor": {"enabled": True}}, "podgpu", "podgpu"),
    "custom-csv": ({"customMetrics": CSV}, "podgpu", "podgpu"),
    "metrics-configmap": ({"metricsConfigMap": {"name": "custom-dcgm-metrics"}},
                          "podgpu", "podgpu"),
    "cloudwatch-pod-identity": ({"cloudwatch": CW}, "podgpu", "podgpu"),
    "cloudwatch-irsa": ({"cloudwatch": {**CW, "credentials": "irsa", "irsaRoleArn": ROLE}},
                        "podgpu", "podgpu"),
    "cloudwatch-node-role": ({"cloudwatch": {**CW, "credentials": "nodeRole"}},
                             "podgpu", "podgpu"),
    "container-insights": ({"cloudwatch": {**CW, "containerInsights": {"enabled": True}}},
                           "podgpu", "podgpu"),
    "default-runtime": ({"runtimeClassName": ""}, "podgpu", "podgpu"),
    "gpu-operator-validation": ({"gpuOperator": {"validation": True}}, "podgpu", "podgpu"),
    "gpu-operator-client": ({"gpuOperator": {"client": True}}, "podgpu", "podgpu"),
    "no-network-policy": ({"networkPolicy": {"enabled": False}}, "podgpu", "podgpu"),
    "own-service-account": ({"serviceAccount": {"create": False, "name": "gpu-reader"},
                             "imagePullSecrets": [{"name": "registry"}]}, "podgpu", "podgpu"),
    "re-namespaced": ({"serviceMonitor": {"enabled": True}, "cloudwatch": CW},
                      "gpu-metrics", "team-gpu"),
    "dcgm-exporter-values": (DCGM_USUAL, "podgpu", "podgpu"),
    "replaces-exporter": ({"gpuOperator": {"replacesExporter": True},
                           "serviceMonitor": {"enabled": True, "interval": "15s",
                                              "scrapeTimeout": "10s", "honorLabels": False},
                           "cloudwatch": CW}, "podgpu", "gpu-operator"),
    "all-on": (ALL_ON, "podgpu", "podgpu"),
}


@pytest.fixture(scope="module", autouse=True)
def _rendered() -> None:
    """The whole matrix in one go, four `helm template` processes at a time."""
    prerender(list(MATRIX.values()))


def objects(name: str) -> list[dict[str, Any]]:
    values, release, namespace = MATRIX[name]
    return list(chart(values, release=release, namespace=namespace))


monitor_validator = cache(servicemonitor_validator)


def validate(obj: dict[str, Any]) -> None:
    if obj["apiVersion"] == "monitoring.coreos.com/v1":
        errors = [f"{list(e.path)}: {e.message}" for e in monitor_validator().iter_errors(obj)]
        assert errors == [], errors
        return
    for version in K8S_VERSIONS:
        validate_strict(obj, version)


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


# --- lint ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["defaults", "all-on", "dcgm-exporter-values"])
def test_helm_lint_strict(name: str, tmp_path: Path) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", values_file(tmp_path, MATRIX[name][0]))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_chart_version_is_the_project_version() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert meta["version"] == meta["appVersion"] == version


def test_declarations_are_the_shipped_ones() -> None:
    ours = (CHART / "files" / "cwagent-config.json").read_text()
    assert ours == (ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json").read_text(), \
        "copy deploy/cloudwatch/podgpu-declarations.json to deploy/helm/podgpu/files/"


# --- every rendering, as the kustomize ones are checked -----------------------------------
@pytest.mark.parametrize("name", MATRIX)
def test_rendering_validates_and_is_one_deployment(name: str) -> None:
    values, _, ns = MATRIX[name]
    objs = objects(name)
    for obj in objs:
        validate(obj)
        assert obj["metadata"].get("namespace", ns) == ns, obj["kind"]
    ds = one(objs, "DaemonSet")  # exactly one exporter per node
    pod = ds["spec"]["template"]["spec"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # RBAC: every binding names the ServiceAccount the pods run as, in their namespace, and a
    # role that is rendered; pods only, unless Container Insights asks for nodes and services.
    accounts = [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]
    sa_name = values.get("serviceAccount", {}).get("name") or accounts[0]
    assert accounts == ([] if values.get("serviceAccount", {}).get("create") is False
                        else [sa_name])
    assert pod["serviceAccountName"] == sa_name
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    bindings = [o for o in objs if o["kind"] == "ClusterRoleBinding"]
    assert len(bindings) == len(roles)
    for b in bindings:
        (subject,) = b["subjects"]
        assert (subject["kind"], subject["name"], subject["namespace"]) == (
            "ServiceAccount", sa_name, ns)
        assert b["roleRef"]["name"] in roles
    granted = {(r["resources"][0], tuple(r["verbs"])) for role in roles.values()
               for r in role["rules"]}
    insights = values.get("cloudwatch", {}).get("containerInsights", {}).get("enabled")
    assert granted == {("pods", ("get", "list", "watch"))} | (
        {("nodes", ("get",)), ("services", ("list", "watch"))} if insights else set())
    # The metrics port: a container port, the Service's target, open in the NetworkPolicy.
    c = container(objs)
    (port,) = c["ports"]
    svc = one(objs, "Service")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == [port["name"]]
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    if values.get("networkPolicy", {}).get("enabled", True):
        (ingress,) = [p for p in policies if "Ingress" in p["spec"]["policyTypes"]]
        assert ingress["spec"]["ingress"] == [{"ports": [{"port": port["name"],
                                                          "protocol": "TCP"}]}]
        for p in policies:
            assert p["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    else:
        assert policies == []
    # TLS: every probe and the ServiceMonitor, or none.
    tls = values.get("tlsServerConfig", {}).get("enabled", False)
    schemes = {c[p]["httpGet"]["scheme"] for p in ("startupProbe", "livenessProbe",
                                                    "readinessProbe")}
    assert schemes == {"HTTPS" if tls else "HTTP"}
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == (1 if values.get("serviceMonitor", {}).get("enabled") else 0)
    for sm in monitors:
        assert "namespaceSelector" not in sm["spec"]
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] in [p["name"] for p in svc["spec"]["ports"]]
        assert ep["scheme"] == ("https" if tls else "http")
        assert ("tlsConfig" in ep) == tls
    # Security: the base's container and pod security, whatever the values.
    base = render("base")
    assert c["securityContext"] == container(base)["securityContext"]
    assert pod["securityContext"] == one(base, "DaemonSet")["spec"]["template"]["spec"][
        "securityContext"]
    for init in pod.get("initContainers", ()):
        assert init["securityContext"] == c["securityContext"]
        assert init["image"] == c["image"]


def test_checkov_passes_every_rendering(tmp_path: Path) -> None:
    """checkov over the whole matrix in one run, with the overlays' reasoned skip list."""
    assert CHECKOV.exists(), "checkov is not installed: run scripts/check"
    seen: set[str] = set()
    for name in MATRIX:  # each distinct object once: most recur across the matrix
        fresh = [o for o in objects(name) if json.dumps(o, sort_keys=True) not in seen]
        seen |= {json.dumps(o, sort_keys=True) for o in fresh}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(fresh))
    out = subprocess.run(
        [str(CHECKOV), "-d", str(tmp_path), "--framework", "kubernetes", "--quiet", "--compact",
         "--skip-download", "-o", "json", "--skip-check", ",".join(CHECKOV_SKIPS)],
        capture_output=True, text=True, timeout=300)
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = sorted({(f["check_id"], f["resource"], f["file_path"]) for r in reports
                     for f in r["results"]["failed_checks"]})
    assert failed == []
    assert sum(r["summary"]["passed"] for r in reports) > 500  # it did scan the resources
    assert sum(r["summary"]["parsing_errors"] for r in reports) == 0


@pytest.mark.parametrize("name", MATRIX)
def test_rendering_steps_aside_in_every_gpu_operator_phase(name: str) -> None:
    """The phases of tests/deploy/test_operator_phases.py, on the chart's pod spec: never on a
    node being drained of GPU clients; on ready nodes unless the values narrow it (the client
    label: v26.7 only, as the gpu-operator overlay)."""
    values = MATRIX[name][0]
    ds = one(objects(name), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    operator = values.get("gpuOperator", {})
    as_overlay = ("overlays/dcgm-exporter-migration" if operator.get("replacesExporter")
                  else "overlays/gpu-operator" if operator.get("client") else "base")
    meta = {**ds["spec"]["template"]["metadata"], "namespace": ds["metadata"]["namespace"]}
    extra = values.get("nodeSelector", {})  # the user's own node label, on every node here
    for op in OPERATORS:
        for phase, (labels, kind) in phases(op).items():
            want = expected(as_overlay, op, kind)
            assert schedules(pod, {**labels, **extra}) is want, (name, op.version, phase)
        # where the operator's managers stop GPU clients, they wait for podgpu's pod to exit
        if as_overlay != "base" and expected(as_overlay, op, "ready"):
            assert waited_for(meta, pod, op), (name, op.version)
    for node, (labels, gpu) in NO_OPERATOR.items():  # no GPU Operator at all
        assert schedules(pod, {**labels, **extra}) is (gpu and as_overlay == "base"), node


# --- what the values do ---------------------------------------------------------------------
def test_defaults_are_a_prometheus_exporter() -> None:
    """No values: the DaemonSet serving :9400, a headless Service Prometheus finds by its
    scrape annotations, no ServiceMonitor (its CRD may be missing) and no CloudWatch."""
    objs = objects("defaults")
    c = container(objs)
    assert c["args"][:2] == ["serve", "--collectors"]
    assert c["args"][c["args"].index("--address") + 1] == ":9400"
    assert "--cloudwatch-config" not in c["args"]
    svc = one(objs, "Service")
    annotations = svc["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(c["ports"][0]["containerPort"]) == "9400"
    assert svc["spec"]["clusterIP"] == "None"
    assert not [o for o in objs if o["kind"] in ("ServiceMonitor", "ConfigMap", "Secret")]
    assert c["image"] == "podgpu-image-not-set.invalid/podgpu:0.1.0"


def test_dcgm_exporter_values_land_where_that_chart_puts_them(tmp_path: Path) -> None:
    values = DCGM_USUAL
    objs = objects("dcgm-exporter-values")
    ds = one(objs, "DaemonSet")
    tpl = ds["spec"]["template"]
    pod = tpl["spec"]
    c = container(objs)
    assert pod["tolerations"] == values["tolerations"]
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert c["resources"] == values["resources"]
    assert c["env"][-1] == values["extraEnv"][0]
    assert c["args"][-2:] == values["arguments"]  # after the chart's: the last -f wins
    # podgpu's own parser on the container's args and literal env: the last -f, and
    # dcgm-exporter's Kubernetes options under their environment names
    launch = prepare(objs, tmp_path, pod_resources_dir=tmp_path, proc_fixture=FIXTURES / "proc")
    settings = parse_serve_args(launch.args[1:], launch.env)
    assert settings.collect.collectors == str(ROOT / "etc" / "dcp-metrics-included.csv")
    assert settings.kubernetes.pod_labels is True and settings.kubernetes.pod_uid is True
    assert settings.kubernetes.label_allowlist == ("^app$", "^team$")
    assert settings.kubernetes.dra is True
    assert settings.kubernetes.gpu_id_type == "device-name"  # from extraEnv
    assert tpl["metadata"]["annotations"] == values["podAnnotations"]
    assert tpl["metadata"]["labels"]["cost-center"] == "gpu"
    assert pod["priorityClassName"] == "gpu-critical"
    (vol,) = [v for v in pod["volumes"] if v["name"] == "pod-resources"]
    assert vol["hostPath"]["path"] == "/data/kubelet/pod-resources"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == values["rollingUpdate"]
    # affinity: the user's podAntiAffinity beside the chart's GPU-node affinity
    assert pod["affinity"]["podAntiAffinity"] == values["affinity"]["podAntiAffinity"]
    assert pod["affinity"]["nodeAffinity"] == one(render("base"), "DaemonSet")["spec"][
        "template"]["spec"]["affinity"]["nodeAffinity"]
    sm = one(objs, "ServiceMonitor")
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["interval"], ep["scrapeTimeout"], ep["honorLabels"]) == ("15s", "10s", False)
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert ep["relabelings"][-1] == values["serviceMonitor"]["relabelings"][0]
    assert ep["metricRelabelings"] == values["serviceMonitor"]["metricRelabelings"]
    assert {"action": "labeldrop", "regex": "(pod|namespace|container)"} in ep["relabelings"]


def test_in_place_of_the_operators_exporter() -> None:
    """gpuOperator.replacesExporter: what the operator's exporter objects carry
    (assets/state-dcgm-exporter/0400_service.yaml, 0500_service_monitor.yaml,
    0800_daemonset.yaml), under podgpu's own names (the operator deletes its exporter's names
    while the exporter is disabled)."""
    objs = objects("replaces-exporter")
    for o in objs:
        assert o["metadata"]["name"] != "nvidia-dcgm-exporter", o["kind"]
    ds = one(objs, "DaemonSet")
    assert ds["spec"]["template"]["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    c = container(objs)
    assert c["name"] == "nvidia-dcgm-exporter"
    assert c["args"][c["args"].index("--collectors") + 1] == \
        "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert c["args"][c["args"].index("--emf-container-name") + 1] == c["name"]
    svc = one(objs, "Service")
    assert svc["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("gpu-metrics", 9400)]
    sm = one(objs, "ServiceMonitor")
    assert sm["spec"]["jobLabel"] == "app"
    assert sm["spec"]["selector"]["matchLabels"]["app"] == "nvidia-dcgm-exporter"
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["port"], ep["interval"], ep["scrapeTimeout"], ep["honorLabels"]) == (
        "gpu-metrics", "15s", "10s", False)


def test_a_user_node_affinity_replaces_the_chart_one() -> None:
    mine = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}]}}
    pod = one(list(chart({"affinity": {"nodeAffinity": mine}})), "DaemonSet")["spec"][
        "template"]["spec"]
    assert pod["affinity"] == {"nodeAffinity": mine}


def test_the_servicemonitor_release_label_can_be_removed() -> None:
    sm = one(list(chart({"serviceMonitor": {"enabled": True,
                                            "additionalLabels": {"release": None}}})),
             "ServiceMonitor")
    assert "release" not in sm["metadata"]["labels"]


@pytest.mark.parametrize(("name", "path"), [
    ("custom-csv", "/etc/podgpu/metrics/metrics.csv"),
    ("metrics-configmap", "/etc/podgpu/metrics/dcgm-metrics.csv"),
])
def test_the_metric_list_is_mounted_as_a_directory_and_named_by_f(name: str, path: str) -> None:
    """Mounted without subPath, so the kubelet updates the file and podgpu follows it; the
    GPU Operator's ConfigMap key (dcgm-metrics.csv, MetricsConfigFileName in its
    internal/consts) by default."""
    objs = objects(name)
    c = container(objs)
    assert c["args"][c["args"].index("--collectors") + 1] == path
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert "subPath" not in mount and mount["readOnly"] is True
    (vol,) = [v for v in one(objs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
              if v["name"] == mount["name"]]
    if name == "custom-csv":
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"] == vol["configMap"]["name"]]
        assert cm["data"]["metrics.csv"].strip() == CSV.strip()
    else:
        assert vol["configMap"]["name"] == "custom-dcgm-metrics"


def test_cloudwatch_credentials() -> None:
    def egress(objs: list[dict[str, Any]]) -> set[str]:
        return {b["ipBlock"]["cidr"] for o in objs if o["kind"] == "NetworkPolicy"
                for rule in o["spec"].get("egress", ()) for b in rule.get("to", ())}

    assert egress(objects("cloudwatch-pod-identity")) == {"169.254.170.23/32",
                                                          "fd00:ec2::23/128"}
    assert egress(objects("cloudwatch-node-role")) == {"169.254.169.254/32", "fd00:ec2::254/128"}
    assert egress(objects("cloudwatch-irsa")) == set()  # STS over 443, in the base policy
    for name in ("cloudwatch-pod-identity", "cloudwatch-node-role", "cloudwatch-irsa"):
        annotations = one(objects(name), "ServiceAccount")["metadata"].get("annotations", {})
        assert annotations == ({"eks.amazonaws.com/role-arn": ROLE}
                               if name == "cloudwatch-irsa" else {}), name
    objs = objects("cloudwatch-pod-identity")
    (env,) = [o for o in objs if o["kind"] == "ConfigMap"
              and o["metadata"]["name"].endswith("-cloudwatch-env")]
    assert env["data"] == {"CLUSTER_NAME": "my-cluster", "AWS_REGION": "us-east-1"}


def web_secret(objs: list[dict[str, Any]]) -> dict[str, bytes]:
    (secret,) = [o for o in objs if o["kind"] == "Secret"
                 and o["metadata"]["name"].endswith("-web-config")]
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_the_web_config_is_one_podgpu_loads_with_working_passwords() -> None:
    """podgpu's own parser on the chart's web-config.yml; Helm's bcrypt hashes check against
    the passwords; the ServiceMonitor scrapes as the first user by name with its password."""
    objs = objects("tls-basic-auth")
    files = web_secret(objs)
    config = parse_web_config(files["web-config.yml"].decode(), "/etc/podgpu/web/web-config.yml")
    assert config.tls is not None
    assert config.tls.cert_file == "/etc/podgpu/web/tls.crt"
    assert config.tls.key_file == "/etc/podgpu/web/tls.key"
    assert config.tls.client_ca_file == "/etc/podgpu/web/ca.crt"
    assert config.tls.client_auth_type == "VerifyClientCertIfGiven"
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(files)
    assert bcrypt.checkpw(b"s3cret", config.users["prometheus"].encode())
    assert not bcrypt.checkpw(b"wrong", config.users["prometheus"].encode())
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    (auth,) = [o for o in objs if o["kind"] == "Secret"
               and o["metadata"]["name"] == ep["basicAuth"]["username"]["name"]]
    assert base64.b64decode(auth["data"][ep["basicAuth"]["username"]["key"]]) == b"prometheus"
    assert base64.b64decode(auth["data"][ep["basicAuth"]["password"]["key"]]) == b"s3cret"
    all_on = objects("all-on")
    (ep,) = one(all_on, "ServiceMonitor")["spec"]["endpoints"]
    (auth,) = [o for o in all_on if o["kind"] == "Secret" and o["metadata"]["name"] ==
               ep["basicAuth"]["username"]["name"]]
    assert base64.b64decode(auth["data"]["username"]) == b"alice"  # first by name


def test_a_generated_certificate_verifies_for_the_servicemonitor(tmp_path: Path) -> None:
    """OpenSSL verifies the generated certificate against the CA the ServiceMonitor is given,
    for the server name it checks."""
    objs = objects("tls-generated")
    files = web_secret(objs)
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep["tlsConfig"]["ca"]["secret"]["key"] in files
    for k, v in files.items():
        (tmp_path / k).write_bytes(v)
    ca = tmp_path / ep["tlsConfig"]["ca"]["secret"]["key"]
    out = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_hostname",
                          ep["tlsConfig"]["serverName"], str(tmp_path / "tls.crt")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    wrong = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_hostname",
                            "elsewhere", str(tmp_path / "tls.crt")],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0  # control: the name is checked
    # The existing-Secret forms point the ServiceMonitor at that Secret instead.
    (ep,) = one(objects("tls-existing-secret"), "ServiceMonitor")["spec"]["endpoints"]
    assert ep["tlsConfig"]["ca"]["secret"] == {"name": "my-tls", "key": "ca.crt"}
    (ep,) = one(objects("web-config-secret"), "ServiceMonitor")["spec"]["endpoints"]
    assert ep["tlsConfig"]["ca"]["secret"] == {"name": "podgpu-web-config", "key": "ca.crt"}


# --- values.schema.json and the templates' own checks --------------------------------------
REFUSED = [
    ({"serviceMonitor": {"enabled": "yes"}}, "serviceMonitor.enabled: Invalid type"),
    ({"serviceMonitor": {"honorlabels": True}}, "serviceMonitor: Additional property honorlabels"),
    ({"serviceMonitor": {"interval": "1 second"}}, "serviceMonitor.interval"),
    ({"tolerations": {"key": "nvidia.com/gpu"}}, "tolerations: Invalid type"),
    ({"nodeSelector": {"gpu": True}}, "nodeSelector.gpu: Invalid type"),
    ({"arguments": "-f /etc/x.csv"}, "arguments: Invalid type"),
    ({"extraEnv": {"A": "b"}}, "extraEnv: Invalid type"),
    ({"resources": {"limit": {"cpu": "1"}}}, "resources: Additional property limit"),
    ({"service": {"port": "9400"}}, "service.port: Invalid type"),
    ({"image": {"digest": "latest"}}, "image.digest: Does not match pattern"),
    ({"cloudwatch": {"enabled": True}}, "cloudwatch.clusterName"),
    ({"cloudwatch": {**CW, "credentials": "imds"}}, "cloudwatch.credentials"),
    ({"cloudwatch": {**CW, "credentials": "irsa"}}, "cloudwatch.irsaRoleArn"),
    ({"tlsServerConfig": {"enabled": True, "clientAuthType": "RequireAnyClientCert"}},
     "tlsServerConfig.clientAuthType"),
    ({"serviceMonitr": {"enabled": True}}, "Additional property serviceMonitr"),
    ({"customMetrics": CSV, "metricsConfigMap": {"name": "x"}},
     "customMetrics and metricsConfigMap.name"),
    ({"tlsServerConfig": {"enabled": True, "cert": PEM["cert"]}},
     "tlsServerConfig.cert and tlsServerConfig.key"),
    ({"tlsServerConfig": {"enabled": True, "autoGenerated": False}}, "tlsServerConfig.enabled"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_a_wrong_value_is_refused_naming_it(values: dict[str, Any], message: str) -> None:
    out = template(values)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_lint_refuses_a_wrong_value_too(tmp_path: Path) -> None:
    out = helm("lint", "--strict", str(CHART), "-f",
               values_file(tmp_path, {"serviceMonitor": {"enabled": "yes"}}))
    assert out.returncode != 0
    assert "serviceMonitor.enabled: Invalid type. Expected: boolean" in out.stdout + out.stderr


# --- NOTES ---------------------------------------------------------------------------------
def notes(values: dict[str, Any], tmp_path: Path) -> str:
    """NOTES.txt as `helm install` prints it (rendered here through a template in a copy of
    the chart that includes it: `helm template` skips NOTES, `helm install` needs a cluster)."""
    copy = tmp_path / "podgpu"
    shutil.copytree(CHART, copy)
    (copy / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ include "podgpu/templates/NOTES.txt" . | toJson }}\n')
    out = template(values, chart=copy)
    assert out.returncode == 0, out.stderr
    (doc,) = [d for d in yaml.safe_load_all(out.stdout) if d and "notes" in d]
    return str(doc["notes"])


def test_notes_say_what_to_check_next(tmp_path: Path) -> None:
    text = notes({}, tmp_path)
    assert "kubectl -n podgpu get daemonset podgpu" in text
    assert "pod-security.kubernetes.io/enforce=privileged" in text
    assert "curl -s http://127.0.0.1:9400/metrics" in text
    assert "serviceMonitor.enabled=true" in text
    assert "CloudWatch" not in text
    text = notes(ALL_ON, tmp_path / "all")
    assert "curl -sk https://127.0.0.1:9400/metrics -u USER:PASSWORD" in text
    assert "serviceMonitor/podgpu/podgpu/0" in text
    assert "/aws/containerinsights/my-cluster/prometheus" in text
    assert "create-pod-identity-association --cluster-name my-cluster" in text
    for path in re.findall(r"deploy/cloudwatch/[\w.-]+\.json", text):  # files that exist
        assert (ROOT / path).is_file(), path
    assert "logs <pod> -c toolkit-validation" in text


# --- the release's package -----------------------------------------------------------------
def test_the_released_package_names_its_image_by_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "helm"), "package", "--image",
                          "ghcr.io/example/podgpu", "--digest", digest, "--version", "1.2.3",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    package = Path(out.stdout.strip())
    assert package == tmp_path / "podgpu-1.2.3.tgz" and package.is_file()
    rendered = template({}, chart=package)
    assert rendered.returncode == 0, rendered.stderr
    objs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert container(objs)["image"] == f"ghcr.io/example/podgpu@{digest}"
    assert one(objs, "DaemonSet")["metadata"]["labels"]["helm.sh/chart"] == "podgpu-1.2.3"
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "helm"), "package", "--image",
                          "ghcr.io/example/podgpu", "--digest", "latest", "--version", "1.2.3",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--digest 'latest'" in bad.stderr


# --- the chart's pod spec runs --------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("name", ["defaults", "custom-csv"])
def test_the_chart_pod_spec_starts_a_working_exporter(name: str, tmp_path: Path,
                                                      kube_api: Any) -> None:
    """The rendered container's own args, env and mounts (tests/deploy/contract.py) serve
    /metrics with the workload's pod label; with the inline metric list, only its field."""
    objs = objects(name)
    with started_beside_train(objs, tmp_path, kube_api) as (run, _logs):
        def labelled() -> bytes | None:
            status, body = get(run.base + "/metrics")
            return body if status == 200 and any(
                s.get("pod") == "train" for s in series(body, "DCGM_FI_DEV_GPU_UTIL")) \
                else None

        body = wait_until(labelled, run.proc, 30, "DCGM_FI_DEV_GPU_UTIL{pod=train}")
        fb_used = series(body, "DCGM_FI_DEV_FB_USED")
        assert (fb_used == []) == (name == "custom-csv")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            http = run.c[probe]["httpGet"]
            assert get(f"{run.base}{http['path']}")[0] == 200, probe



def test_the_release_pushes_the_chart_beside_the_image_signed_the_same_way() -> None:
    """.github/workflows/release.yml: after the image has passed its checks, the chart is
    packaged by scripts/helm with the pushed digest, pushed beside the image, signed and
    verified keyless as the image is, and pulled with no credentials."""
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    (job,) = wf["jobs"].values()
    names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
    by_name = dict(zip(names, job["steps"], strict=True))
    package = by_name["Package the Helm chart with the pushed image"]
    assert "scripts/helm package" in package["run"]
    assert package["env"]["DIGEST"] == "${{ steps.build.outputs.digest }}"
    push = by_name["Push, sign and verify the chart"]["run"]
    assert "helm push" in push and 'cosign sign --yes "$repo/podgpu@$digest"' in push
    assert "cosign verify" in push and "--certificate-identity" in push
    pulled = by_name["The chart pulled with no credentials names the pushed image"]
    assert "HELM_REGISTRY_CONFIG=$(mktemp -d)" in pulled["run"]
    smoke = names.index("Smoke both pulled platforms (arm64 under QEMU)")
    assert smoke < names.index("Package the Helm chart with the pushed image")
    image_sign = by_name["Sign the image (keyless)"]["run"]
    assert image_sign.startswith("cosign sign --yes")  # the same signing as the image's


def test_the_readme_helm_command_renders() -> None:
    """README's quick deploy with Helm, as written (`helm template` for `helm install`)."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    (line,) = [ln.strip() for ln in text.splitlines()
               if ln.strip().startswith("helm install podgpu deploy/helm/podgpu")]
    args = shlex.split(line)[2:]
    args.remove("--create-namespace")
    out = helm("template", *[str(ROOT / a) if a == "deploy/helm/podgpu" else a for a in args])
    assert out.returncode == 0, out.stderr
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert container(objs)["image"] == "REGISTRY/podgpu:0.1.0"
    assert "--cloudwatch-config" in container(objs)["args"]
    assert one(objs, "ServiceMonitor")["metadata"]["namespace"] == "podgpu"


# Every value of NVIDIA's dcgm-exporter chart: github.com/NVIDIA/dcgm-exporter
# deployment/values.yaml (chart 4.8.2, commit d5e5f510a1b6b393f39a43293ccd9dc985defc79), plus
# `initContainers`, which its daemonset.yaml template reads.
DCGM_EXPORTER_VALUES = (
    "image.repository", "image.pullPolicy", "image.tag", "arguments", "imagePullSecrets",
    "nameOverride", "fullnameOverride", "namespaceOverride", "hostPID", "runtimeClassName",
    "priorityClassName", "hostNetwork", "serviceAccount.create", "serviceAccount.annotations",
    "serviceAccount.name", "rollingUpdate.maxUnavailable", "rollingUpdate.maxSurge", "podLabels",
    "podAnnotations", "podSecurityContext", "securityContext", "service.enable", "service.type",
    "service.internalTrafficPolicy", "service.clusterIP", "service.port", "service.address",
    "service.annotations", "resources", "serviceMonitor.apiVersion", "serviceMonitor.enabled",
    "serviceMonitor.interval", "serviceMonitor.scrapeTimeout", "serviceMonitor.honorLabels",
    "serviceMonitor.additionalLabels", "serviceMonitor.relabelings",
    "serviceMonitor.metricRelabelings", "nodeSelector", "tolerations", "affinity",
    "extraHostVolumes", "extraConfigMapVolumes", "extraVolumeMounts", "extraEnv", "kubeletPath",
    "tlsServerConfig.enabled", "tlsServerConfig.autoGenerated", "tlsServerConfig.existingSecret",
    "tlsServerConfig.certFilename", "tlsServerConfig.keyFilename", "tlsServerConfig.caFilename",
    "tlsServerConfig.clientAuthType", "tlsServerConfig.key", "tlsServerConfig.cert",
    "tlsServerConfig.ca", "basicAuth.users", "kubernetes.enablePodLabels",
    "kubernetes.enablePodUID", "kubernetes.podLabelAllowlistRegex", "kubernetes.rbac.create",
    "debugDump.enabled", "debugDump.directory", "debugDump.retention", "debugDump.compression",
    "kubernetesDRA.enabled", "customMetrics", "livenessProbe.initialDelaySeconds",
    "livenessProbe.periodSeconds", "readinessProbe.initialDelaySeconds", "initContainers",
)


def mapping_rows() -> dict[str, str]:
    """docs/deploy.md's table of dcgm-exporter values: each value named in a row's first cell
    (`a.b`, `.c` continuing the last full name) -> the row's second cell."""
    docs = (ROOT / "docs" / "deploy.md").read_text()
    table = docs.split("**Every value of the dcgm-exporter chart**", 1)[1].split("\n\n")[1]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        first, second = [cell.strip() for cell in line.strip("|").split("|")][:2]
        prefix = ""
        for name in re.findall(r"`([^`]+)`", first):
            if name.startswith("."):
                name = prefix + name[1:]
            else:
                prefix = name.rsplit(".", 1)[0] + "." if "." in name else ""
            rows[name] = second
    return rows


def test_docs_map_every_dcgm_exporter_value() -> None:
    rows = mapping_rows()
    assert sorted(set(DCGM_EXPORTER_VALUES) - set(rows)) == []
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, says in rows.items():
        here: Any = defaults
        for part in name.split("."):
            here = here.get(part, KeyError) if isinstance(here, dict) else KeyError
        # "same" means this chart has the value under that name; "none" that it has not
        assert (here is not KeyError) == says.startswith("same"), (name, says)
        assert says.startswith(("same", "none")), (name, says)
