"""Every overlay renders with `kubectl kustomize`, validates against the
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

from tests.deploy.render import (
    CHECKOV,
    COMPONENTS,
    OVERLAYS,
    ROOT,
    container,
    one,
    render,
    render_text,
    render_with,
    validate_strict,
)

K8S_VERSIONS = ("1.33.0", "1.37.0")  # oldest in EKS standard support; newest upstream minor
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CHECKOV_SKIPS = {
    "CKV_K8S_23": "runs as UID 0: the kubelet's pod-resources socket is root-owned and not "
                  "writable by others; every capability is dropped and escalation is off",
    "CKV_K8S_40": "same as CKV_K8S_23 (UID 0 for the kubelet socket)",
    "CKV_K8S_38": "the service-account token is needed: the pod watch lists and watches this "
                  "node's pods (RBAC: get/list/watch on pods only)",
    "CKV_K8S_43": "no image is published, so no digest can be named; the user pins theirs in "
                  "the overlay's `images:` block (digest: sha256:...), docs/deploy.md",
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
        validate_strict(obj, version)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        for version in K8S_VERSIONS:
            validate_strict(obj, version)


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


def crd_validator(vendored: dict[str, Any]) -> jsonschema.Draft7Validator:
    """A validator for objects of a vendored CRD (its `openAPIV3Schema`, `closed`)."""
    schema = closed(vendored["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by kubectl/k8s
    return jsonschema.Draft7Validator(schema)


def servicemonitor_validator() -> jsonschema.Draft7Validator:
    vendored = json.loads((SCHEMAS / "servicemonitor-v0.93.0.json").read_text())
    assert vendored["version"] == "0.93.0" and vendored["kind"] == "ServiceMonitor"
    return crd_validator(vendored)


def test_servicemonitor_matches_the_prometheus_operator_crd() -> None:
    sm = one(render("overlays/prometheus-operator"), "ServiceMonitor")
    errors = [f"{list(e.path)}: {e.message}" for e in servicemonitor_validator().iter_errors(sm)]
    assert errors == []
    (ep,) = sm["spec"]["endpoints"]
    assert ep["honorLabels"] is True and ep["interval"] == "1s" and ep["port"] == "metrics"
    svc = one(render("overlays/prometheus-operator"), "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    # no namespaceSelector: prometheus-operator then looks in the ServiceMonitor's own namespace
    assert "namespaceSelector" not in sm["spec"]
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]
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
    for init in pod.get("initContainers", []):  # the same lock-down for the validation gate
        assert {k: init["securityContext"][k] for k in sc} == sc, init["name"]
    mounts = {m["name"]: m for x in (c, *pod.get("initContainers", []))
              for m in x["volumeMounts"]}
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


# Nodes as GPU Operator (GFD), NFD, EKS Auto Mode, Karpenter, the accelerator label and plain
# eksctl node groups label them (eksctl sets no GPU label: only the well-known instance type).
GPU_NODES = {
    "gpu-operator": {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64"},
    "nfd": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    "eks-auto-mode": {"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"},
    "karpenter": {"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"},
    "accelerator-label": {"k8s.amazonaws.com/accelerator": "nvidia-a10g"},
    "eksctl-g5": {"node.kubernetes.io/instance-type": "g5.2xlarge",
                  "eks.amazonaws.com/nodegroup": "g5", "alpha.eksctl.io/nodegroup-name": "g5"},
    "eksctl-g5g-graviton": {"node.kubernetes.io/instance-type": "g5g.xlarge"},
    "eksctl-p5": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
    "eksctl-g6e": {"node.kubernetes.io/instance-type": "g6e.12xlarge"},
}
OTHER_NODES = {
    "cpu": {"node.kubernetes.io/instance-type": "m5.xlarge"},
    "gfd-no-gpu": {"nvidia.com/gpu.present": "false"},
    "amd-gpu": {"node.kubernetes.io/instance-type": "g4ad.xlarge"},
}
# The GPU Operator's default for its DaemonSets (deployments/gpu-operator/values.yaml,
# daemonsets.tolerations), which its exporter gets.
OPERATOR_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def matches(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Kubernetes' nodeSelectorTerms semantics: any term, all of its expressions."""
    def ok(e: dict[str, Any]) -> bool:
        have = labels.get(e["key"])
        op = e["operator"]
        if op == "In":
            return have in e["values"]
        if op == "NotIn":
            return have not in e["values"]
        if op == "Exists":
            return have is not None
        if op == "DoesNotExist":
            return have is None
        raise AssertionError(op)
    return any(all(ok(e) for e in t["matchExpressions"]) for t in terms)


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
    assert pod["runtimeClassName"] == "nvidia"  # the GPU Operator's, CDI or not
    assert pod["tolerations"] == OPERATOR_TOLERATIONS
    if "affinity" in pod:  # the overlays for GPU Operator clusters: test_operator_phases.py
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        for name, labels in GPU_NODES.items():
            assert matches(terms, labels), f"{overlay}: not scheduled on a {name} node"
        for name, labels in OTHER_NODES.items():
            assert not matches(terms, labels), f"{overlay}: scheduled on a {name} node"
    else:
        assert overlay == "overlays/dcgm-exporter-migration", overlay
    assert pod["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    # Liveness and start-up on /health (200 while the driver is awaited or a GPU is lost),
    # readiness on /health/ready (503 while the driver is awaited); plain HTTP in the overlays,
    # HTTPS with the tls component (test_components_render...).
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    live = c["livenessProbe"]
    assert live["httpGet"]["path"] == "/health"
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["scheme"] == "HTTP"
        assert c[probe]["httpGet"]["port"] == "metrics"
    res = c["resources"]
    assert res["requests"]["memory"] and res["limits"]["memory"] and res["limits"]["cpu"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 9400}
    svc = one(objs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("component", COMPONENTS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_components_render_on_every_overlay_and_validate(overlay: str, component: str) -> None:
    objs = list(render_with(overlay, component))
    for obj in objs:
        if obj["apiVersion"] != "monitoring.coreos.com/v1":
            validate_strict(obj, K8S_VERSIONS[-1])
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    c = container(objs)
    if component == "tls":
        assert {c[p]["httpGet"]["scheme"] for p in ("startupProbe", "livenessProbe",
                                                      "readinessProbe")} == {"HTTPS"}
        args = c["args"]
        assert args[args.index("--web-config-file") + 1] == "/etc/podgpu/web/web-config.yml"
        (vol,) = [v for v in pod["volumes"] if v["name"] == "web-config"]
        assert vol["secret"]["secretName"] == "podgpu-web-config"
        assert {"name": "web-config", "mountPath": "/etc/podgpu/web", "readOnly": True} in c[
            "volumeMounts"]
    elif component == "default-runtime":
        assert "runtimeClassName" not in pod
    elif component == "gpu-operator-client":
        assert pod["nodeSelector"]["nvidia.com/gpu.deploy.client"] == "true"
        assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation"]
    else:
        (imds,) = [o for o in objs if o["kind"] == "NetworkPolicy"
                   and o["metadata"]["name"] == "podgpu-imds"]
        (rule,) = imds["spec"]["egress"]
        assert {b["ipBlock"]["cidr"] for b in rule["to"]} == {"169.254.169.254/32",
                                                             "fd00:ec2::254/128"}
        ns = one(objs, "DaemonSet")["metadata"]["namespace"]
        assert imds["metadata"]["namespace"] in (ns, "podgpu")


# What the GPU Operator names its exporter's objects (assets/state-dcgm-exporter/); it deletes
# them by these names in its namespace on every reconcile while its exporter is disabled.
OPERATOR_EXPORTER_NAMES = {"nvidia-dcgm-exporter"}


def test_dcgm_exporter_migration_looks_like_the_operators_exporter() -> None:
    """The operator's exporter Service (0400_service.yaml): label app=nvidia-dcgm-exporter,
    port 9400 named gpu-metrics, prometheus.io/scrape; its ServiceMonitor (0500): port
    gpu-metrics, jobLabel app; but no object under a name the operator deletes."""
    objs = render("overlays/dcgm-exporter-migration")
    for o in objs:
        assert o["metadata"]["name"] not in OPERATOR_EXPORTER_NAMES, o["kind"]
        assert o["metadata"].get("namespace", "gpu-operator") == "gpu-operator", o["kind"]
    svc = one(objs, "Service")
    assert svc["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("gpu-metrics", 9400)]
    assert not [o for o in objs if o["kind"] == "Namespace"]  # the operator owns gpu-operator
    pod_labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app"] == "nvidia-dcgm-exporter"
    c = container(objs)
    assert c["name"] == "nvidia-dcgm-exporter"
    assert "/etc/dcgm-exporter/dcp-metrics-included.csv" in c["args"]
    args = c["args"]
    assert args[args.index("--emf-container-name") + 1] == c["name"]  # EMF's container_name
    sm = one(objs, "ServiceMonitor")
    errors = [f"{list(e.path)}: {e.message}" for e in servicemonitor_validator().iter_errors(sm)]
    assert errors == []
    assert sm["spec"]["jobLabel"] == "app"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert "namespaceSelector" not in sm["spec"] and sm["metadata"]["namespace"] == "gpu-operator"
    (ep,) = sm["spec"]["endpoints"]
    # the chart's defaults for the operator's ServiceMonitor
    assert (ep["port"], ep["path"], ep["interval"], ep["scrapeTimeout"], ep["honorLabels"]) == (
        "gpu-metrics", "/metrics", "15s", "10s", False)


def test_cloudwatch_overlay() -> None:
    objs = render("overlays/cloudwatch")
    here = ROOT / "deploy" / "kubernetes" / "components" / "cloudwatch" / "cwagent-config.json"
    lead = ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"
    assert here.read_text() == lead.read_text(), "copy deploy/cloudwatch/podgpu-declarations.json"
    sa = one(objs, "ServiceAccount")
    assert not sa["metadata"].get("annotations")  # no placeholder IRSA role (Pod Identity here)
    c = container(objs)
    args = c["args"]
    for flag, value in (("--cloudwatch-config", "/etc/podgpu/cloudwatch/cwagent-config.json"),
                        ("--cluster-name", "$(CLUSTER_NAME)"),
                        ("--emf-namespace", "$(EMF_NAMESPACE)"),
                        # the agent path's identity of the operator's exporter (Service,
                        # its app label, its container's name)
                        ("--emf-service", "nvidia-dcgm-exporter"),
                        ("--emf-service-labels", "app=nvidia-dcgm-exporter"),
                        ("--emf-container-name", "nvidia-dcgm-exporter"),
                        ("--emf-spool-dir", "/var/lib/podgpu/emf-spool")):
        assert args[args.index(flag) + 1] == value
    env = {e["name"]: e for e in c["env"]}
    assert {"CLUSTER_NAME", "AWS_REGION"} <= set(env)
    assert env["EMF_NAMESPACE"]["value"] == "gpu-operator"  # the agent path's Namespace
    (values,) = [o for o in objs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].startswith("podgpu-cloudwatch-env")]
    assert values["data"] == {"CLUSTER_NAME": "", "AWS_REGION": ""}  # no placeholder cluster
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and "cwagent-config.json" in o["data"]]
    assert json.loads(cm["data"]["cwagent-config.json"]) == json.loads(lead.read_text())


def egress_to(policies: list[dict[str, Any]], cidr: str, port: int) -> bool:
    """Some policy lets the pods open `port` to `cidr` (rules without `to` allow any address)."""
    for pol in policies:
        for rule in pol["spec"].get("egress", ()):
            blocks = [t["ipBlock"]["cidr"] for t in rule.get("to", ())]
            ports = [p["port"] for p in rule.get("ports", ())]
            if (not blocks or cidr in blocks) and (not ports or port in ports):
                return True
    return False


def test_cloudwatch_network_policy() -> None:
    """Pod Identity's agent over IPv4 and IPv6, STS and Logs (443), DNS; no IMDS unless the
    node-role-credentials component is added; scraping (ingress to the metrics port) stays."""
    objs = render("overlays/cloudwatch")
    pols = [o for o in objs if o["kind"] == "NetworkPolicy"]
    ds_labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    for pol in pols:
        assert pol["spec"]["podSelector"]["matchLabels"].items() <= ds_labels.items()
    for cidr in ("169.254.170.23/32", "fd00:ec2::23/128"):
        assert egress_to(pols, cidr, 80), cidr
    assert egress_to(pols, "0.0.0.0/0", 443) and egress_to(pols, "0.0.0.0/0", 53)
    for cidr in ("169.254.169.254/32", "fd00:ec2::254/128"):
        assert not egress_to(pols, cidr, 80), cidr
        with_imds = [o for o in render_with("overlays/cloudwatch", "node-role-credentials")
                     if o["kind"] == "NetworkPolicy"]
        assert egress_to(with_imds, cidr, 80), cidr
    (base_pol,) = [p for p in pols if "Ingress" in p["spec"]["policyTypes"]]
    assert base_pol["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    assert not egress_to(pols, "0.0.0.0/0", 25888)  # a TCP/UDP EMF destination needs a patch


def test_iam_policy_is_least_privilege() -> None:
    policy = json.loads((ROOT / "deploy" / "cloudwatch" / "iam-policy.json").read_text())
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert actions <= {"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"}
    for s in policy["Statement"]:
        assert s["Effect"] == "Allow"
        assert s["Resource"] != "*" and ":log-group:" in s["Resource"]


def test_pod_identity_trust_policy() -> None:
    """What EKS Pod Identity needs of the role's trust policy (AWS's EKS user guide, "Create
    the IAM role for Pod Identity"): the service principal pods.eks.amazonaws.com, allowed
    sts:AssumeRole and sts:TagSession (it tags each session), nothing else."""
    policy = json.loads((ROOT / "deploy" / "cloudwatch" / "trust-policy-pod-identity.json")
                        .read_text())
    (st,) = policy["Statement"]
    assert policy["Version"] == "2012-10-17" and st["Effect"] == "Allow"
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(st["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "Condition" not in st  # the association, not the policy, names namespace and account


def test_prometheus_operator_overlay_adds_only_the_namespace_and_servicemonitor() -> None:
    base = {(o["kind"], o["metadata"]["name"]) for o in render("base")}
    po = {(o["kind"], o["metadata"]["name"]) for o in render("overlays/prometheus-operator")}
    assert po - base == {("ServiceMonitor", "podgpu"), ("Namespace", "podgpu")}
