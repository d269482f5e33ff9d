"""Issue 8 item 3: every overlay renders with `kubectl kustomize`, validates against the
Kubernetes schemas of two supported minors (strict: unknown fields fail), the ServiceMonitor
against the prometheus-operator CRD's own schema, passes checkov with a short, reasoned skip
list, and has the security and scheduling properties the issue asks for."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.render import CHECKOV, OVERLAYS, ROOT, container, one, render, render_text

K8S_VERSIONS = ("1.33.0", "1.37.0")  # oldest in EKS standard support; newest upstream minor
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CHECKOV_SKIPS = {
    "CKV_K8S_23": "runs as UID 0: the kubelet's pod-resources socket is root-owned and not "
                  "writable by others; every capability is dropped and escalation is off",
    "CKV_K8S_40": "same as CKV_K8S_23 (UID 0 for the kubelet socket)",
    "CKV_K8S_38": "the service-account token is needed: the pod watch lists and watches this "
                  "node's pods (RBAC: get/list/watch on pods only)",
    "CKV_K8S_43": "no published digest exists in the repository; pin one with `kustomize edit "
                  "set image podgpu=REGISTRY/podgpu@sha256:...` in your overlay",
    "CKV_K8S_15": "the tag is pinned; pull policy Always would make every restart of a node's "
                  "exporter depend on the registry",
}
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))


def k8s_objects(overlay: str) -> list[dict[str, Any]]:
    return [o for o in render(overlay) if o["apiVersion"] != "monitoring.coreos.com/v1"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly(overlay: str, version: str) -> None:
    for obj in k8s_objects(overlay):
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_catches_a_misspelled_field() -> None:
    """Control: the validator is not a no-op on these objects."""
    ds = copy.deepcopy(one(render("base"), "DaemonSet"))
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    sc["readOnlyRootFileSystem"] = sc.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)


def closed(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected: the API server would silently prune a
    misspelled field (structural schemas), so an honorlabels typo would pass unnoticed."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def servicemonitor_validator() -> jsonschema.Draft7Validator:
    vendored = json.loads((SCHEMAS / "servicemonitor-v0.93.0.json").read_text())
    assert vendored["version"] == "0.93.0" and vendored["kind"] == "ServiceMonitor"
    schema = closed(vendored["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by kubectl/k8s
    return jsonschema.Draft7Validator(schema)


def test_servicemonitor_matches_the_prometheus_operator_crd() -> None:
    sm = one(render("overlays/prometheus-operator"), "ServiceMonitor")
    errors = [f"{list(e.path)}: {e.message}" for e in servicemonitor_validator().iter_errors(sm)]
    assert errors == []
    (ep,) = sm["spec"]["endpoints"]
    assert ep["honorLabels"] is True and ep["interval"] == "1s" and ep["port"] == "metrics"
    svc = one(render("overlays/prometheus-operator"), "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    assert ep["port"] in [p["name"] for p in svc["spec"]["ports"]]


def test_servicemonitor_schema_rejects_a_misspelled_field() -> None:
    sm = copy.deepcopy(one(render("overlays/prometheus-operator"), "ServiceMonitor"))
    sm["spec"]["endpoints"][0]["honorlabels"] = sm["spec"]["endpoints"][0].pop("honorLabels")
    assert list(servicemonitor_validator().iter_errors(sm))
    sm["spec"]["endpoints"][0]["honorLabels"] = True
    sm["spec"]["endpoints"][0].pop("honorlabels")
    sm["spec"]["endpoints"][0]["interval"] = "1 second"
    assert list(servicemonitor_validator().iter_errors(sm))


def test_checkov_passes_every_overlay(tmp_path: Path) -> None:
    assert CHECKOV.exists(), "checkov is not installed: run scripts/check"
    for overlay in OVERLAYS:
        (tmp_path / (overlay.replace("/", "_") + ".yaml")).write_text(render_text(overlay))
    out = subprocess.run(
        [str(CHECKOV), "-d", str(tmp_path), "--framework", "kubernetes", "--quiet", "--compact",
         "--skip-download",
         "-o", "json", "--skip-check", ",".join(CHECKOV_SKIPS)],
        capture_output=True, text=True, timeout=300)
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = sorted({(f["check_id"], f["resource"]) for r in reports
                     for f in r["results"]["failed_checks"]})
    assert failed == []
    assert sum(r["summary"]["passed"] for r in reports) > 100  # it did scan the resources
    assert sum(r["summary"]["parsing_errors"] for r in reports) == 0


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_properties(overlay: str) -> None:
    objs = render(overlay)
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    c = container(objs)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and not pod.get("hostIPC")
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host["pod-resources"] == "/var/lib/kubelet/pod-resources"
    assert host["host-proc"] == "/proc"
    writable = {n for n in host if not mounts[n].get("readOnly")}
    assert writable <= {"emf-spool"}, writable  # only the EMF spool is written on the host
    args = c["args"]
    assert args[args.index("--proc-root") + 1] == mounts["host-proc"]["mountPath"]
    sock = args[args.index("--pod-resources-kubelet-socket") + 1]
    assert sock.startswith(mounts["pod-resources"]["mountPath"] + "/")
    # RBAC: read-only on pods, nothing else; the binding names the ServiceAccount as rendered.
    (role,) = [o for o in objs if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]
    sa = one(objs, "ServiceAccount")
    (subject,) = one(objs, "ClusterRoleBinding")["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["metadata"]["name"],
                                                      sa["metadata"]["namespace"])
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert one(objs, "ClusterRoleBinding")["roleRef"]["name"] == role["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduling_and_lifecycle(overlay: str) -> None:
    objs = render(overlay)
    ds = one(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = container(objs)
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys  # GPU Operator nodes
    assert pod["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    # Liveness must not restart the pod for a lost GPU: /health keeps 200 then (the strict
    # /health/gpus would not), and it tolerates a minute of failures.
    live = c["livenessProbe"]
    assert live["httpGet"]["path"] == "/health"
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    res = c["resources"]
    assert res["requests"]["memory"] and res["limits"]["memory"] and res["limits"]["cpu"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 9400}
    svc = one(objs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_dcgm_exporter_migration_keeps_the_operators_service() -> None:
    """GPU Operator's exporter Service (assets/state-dcgm-exporter/0600_service.yaml): name
    nvidia-dcgm-exporter, label app=nvidia-dcgm-exporter, port 9400 named gpu-metrics."""
    objs = render("overlays/dcgm-exporter-migration")
    svc = one(objs, "Service")
    assert svc["metadata"]["name"] == "nvidia-dcgm-exporter"
    assert svc["metadata"]["namespace"] == "gpu-operator"
    assert svc["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("gpu-metrics", 9400)]
    assert not [o for o in objs if o["kind"] == "Namespace"]  # the operator owns gpu-operator
    c = container(objs)
    assert "/etc/dcgm-exporter/dcp-metrics-included.csv" in c["args"]


def test_cloudwatch_overlay() -> None:
    objs = render("overlays/cloudwatch")
    here = ROOT / "deploy" / "kubernetes" / "overlays" / "cloudwatch" / "cwagent-config.json"
    lead = ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"
    assert here.read_text() == lead.read_text(), "copy deploy/cloudwatch/podgpu-declarations.json"
    sa = one(objs, "ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    c = container(objs)
    args = c["args"]
    for flag, value in (("--cloudwatch-config", "/etc/podgpu/cloudwatch/cwagent-config.json"),
                        ("--cluster-name", "$(CLUSTER_NAME)"),
                        ("--emf-label", "Service=nvidia-dcgm-exporter"),
                        ("--emf-spool-dir", "/var/lib/podgpu/emf-spool")):
        assert args[args.index(flag) + 1] == value
    env = {e["name"] for e in c["env"]}
    assert {"CLUSTER_NAME", "AWS_REGION"} <= env
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and "cwagent-config.json" in o["data"]]
    assert json.loads(cm["data"]["cwagent-config.json"]) == json.loads(lead.read_text())


def test_iam_policy_is_least_privilege() -> None:
    policy = json.loads((ROOT / "deploy" / "cloudwatch" / "iam-policy.json").read_text())
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert actions <= {"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"}
    for s in policy["Statement"]:
        assert s["Effect"] == "Allow"
        assert s["Resource"] != "*" and ":log-group:" in s["Resource"]


def test_prometheus_operator_overlay_adds_only_the_servicemonitor() -> None:
    base = {(o["kind"], o["metadata"]["name"]) for o in render("base")}
    po = {(o["kind"], o["metadata"]["name"]) for o in render("overlays/prometheus-operator")}
    assert po - base == {("ServiceMonitor", "podgpu")}
