"""One DaemonSet, two packagings: the chart (real `helm template`) and the kustomize base with
its components (real `kubectl kustomize`) are rendered for the same configurations and their
pod specs compared whole, so a fix made in one and not the other fails here.

What may differ, and nothing else: the image reference (an overlay's `images:` against the
chart's image values), and the hash kustomize's configMapGenerator appends to a ConfigMap's
name. The release is named podgpu in namespace podgpu, so the chart's names are the base's.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import pytest
import yaml

from tests.deploy.helmchart import CHART, chart, prerender
from tests.deploy.render import ROOT, compose, one

ENV = ("podgpu-cloudwatch-env", ("CLUSTER_NAME=my-cluster", "AWS_REGION=us-east-1"))
IRSA = ("podgpu-irsa", ("ROLE_ARN=arn:aws:iam::111122223333:role/podgpu-cloudwatch",))
CW = {"enabled": True, "clusterName": "my-cluster", "region": "us-east-1"}
TLS = {"tlsServerConfig": {"enabled": True}, "webConfig": {"existingSecret": "podgpu-web-config"}}

MIGRATION = {"gpuOperator": {"replacesExporter": True},
             "serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "10s",
                                "honorLabels": False}}
# name: (chart values, kustomize components in the documented order, generated ConfigMaps);
# the migration ones in the operator's namespace
SAME: dict[str, tuple[dict[str, Any], tuple[str, ...], tuple[Any, ...]]] = {
    "base": ({}, (), ()),
    "prometheus": ({"serviceMonitor": {"enabled": True}}, ("prometheus",), ()),
    "tls": ({**TLS, "serviceMonitor": {"enabled": True}}, ("prometheus", "tls"), ()),
    "cloudwatch-pod-identity": ({"cloudwatch": CW}, ("cloudwatch", "cloudwatch-pod-identity"),
                                (ENV,)),
    "cloudwatch-irsa": ({"cloudwatch": {**CW, "credentials": "irsa",
                                        "irsaRoleArn": IRSA[1][0].split("=", 1)[1]}},
                        ("cloudwatch", "cloudwatch-irsa"), (ENV, IRSA)),
    "cloudwatch-node-role": ({"cloudwatch": {**CW, "credentials": "nodeRole"}},
                             ("cloudwatch", "node-role-credentials"), (ENV,)),
    "container-insights": ({"cloudwatch": {**CW, "containerInsights": {"enabled": True}}},
                           ("cloudwatch", "cloudwatch-pod-identity", "container-insights"),
                           (ENV,)),
    "default-runtime": ({"runtimeClassName": ""}, ("default-runtime",), ()),
    "gpu-operator": ({"gpuOperator": {"validation": True}}, ("gpu-operator",), ()),
    "gpu-operator-client": ({"gpuOperator": {"client": True}}, ("gpu-operator-client",), ()),
    "all": ({**TLS, "serviceMonitor": {"enabled": True},
             "cloudwatch": {**CW, "containerInsights": {"enabled": True}},
             "gpuOperator": {"client": True}, "runtimeClassName": ""},
            ("prometheus", "cloudwatch", "cloudwatch-pod-identity", "container-insights",
             "default-runtime", "gpu-operator-client", "tls"), (ENV,)),
    "dcgm-exporter-migration": (MIGRATION, ("prometheus", "dcgm-exporter-migration"), ()),
    "dcgm-exporter-migration-all": (
        {**MIGRATION, **TLS, "cloudwatch": CW},
        ("prometheus", "cloudwatch", "cloudwatch-pod-identity", "dcgm-exporter-migration",
         "tls"), (ENV,)),
}


def namespace(name: str) -> str:
    return "gpu-operator" if "migration" in name else "podgpu"


HASHED = re.compile(r'"(podgpu-cloudwatch(?:-env)?)-[a-z0-9]{10}"')


@pytest.fixture(scope="module", autouse=True)
def _rendered() -> None:
    prerender([(values, "podgpu", namespace(name)) for name, (values, _, _) in SAME.items()])


def normal(spec: dict[str, Any]) -> dict[str, Any]:
    text = HASHED.sub(r'"\1"', json.dumps(spec, sort_keys=True))
    out: dict[str, Any] = json.loads(text)
    for c in (*out["containers"], *out.get("initContainers", ())):
        c["image"] = "IMAGE"
    return out


def both(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    values, components, maps = SAME[name]
    return (list(chart(values, namespace=namespace(name))),
            list(compose(components, config_maps=maps, namespace=namespace(name))))


def pod_specs(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    ours, theirs = both(name)
    return one(ours, "DaemonSet")["spec"], one(theirs, "DaemonSet")["spec"]


@pytest.mark.parametrize("name", SAME)
def test_the_chart_and_kustomize_render_the_same_pod(name: str) -> None:
    ours, theirs = pod_specs(name)
    helm_pod = normal(ours["template"]["spec"])
    kustomize_pod = normal(theirs["template"]["spec"])
    if helm_pod != kustomize_pod:
        diff = difflib.unified_diff(yaml.safe_dump(kustomize_pod).splitlines(),
                                    yaml.safe_dump(helm_pod).splitlines(),
                                    "kubectl kustomize", "helm template", lineterm="")
        pytest.fail(f"{name}: the pod specs differ; change {CHART.relative_to(CHART.parents[2])}"
                    " or deploy/kubernetes so both say the same:\n" + "\n".join(diff))
    for key in ("updateStrategy", "minReadySeconds"):
        assert ours[key] == theirs[key], key
    # The pods carry kustomize's labels (the chart adds its instance and version labels).
    assert theirs["template"]["metadata"]["labels"].items() <= ours["template"]["metadata"][
        "labels"].items()


@pytest.mark.parametrize("name", SAME)
def test_the_chart_and_kustomize_render_the_same_service_and_scrape(name: str) -> None:
    """The Service's ports and labels, the ServiceMonitor's endpoint and job label, the
    ServiceAccount's annotations (IRSA): the same in both."""
    ours, theirs = both(name)
    svc, their_svc = one(ours, "Service"), one(theirs, "Service")
    assert svc["spec"]["ports"] == their_svc["spec"]["ports"]
    assert their_svc["metadata"]["labels"].items() <= svc["metadata"]["labels"].items()
    for annotation, value in their_svc["metadata"].get("annotations", {}).items():
        assert svc["metadata"]["annotations"][annotation] == value
    monitors = [o for o in ours if o["kind"] == "ServiceMonitor"]
    their_monitors = [o for o in theirs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == len(their_monitors)
    for sm, their_sm in zip(monitors, their_monitors, strict=True):
        assert sm["spec"]["endpoints"] == their_sm["spec"]["endpoints"]
        assert sm["spec"].get("jobLabel") == their_sm["spec"].get("jobLabel")
        assert their_sm["metadata"]["labels"].items() <= sm["metadata"]["labels"].items()
    assert one(ours, "ServiceAccount")["metadata"].get("annotations") == one(
        theirs, "ServiceAccount")["metadata"].get("annotations")


@pytest.mark.parametrize("name", SAME)
def test_the_chart_and_kustomize_grant_and_allow_the_same(name: str) -> None:
    """The ClusterRoles' rules and the NetworkPolicies' rules (their pod selectors differ by
    the chart's instance label only)."""
    ours, theirs = both(name)

    def rules(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(o["rules"], sort_keys=True) for o in objs
                      if o["kind"] == "ClusterRole")

    def policies(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps({k: v for k, v in o["spec"].items() if k != "podSelector"},
                                 sort_keys=True) for o in objs if o["kind"] == "NetworkPolicy")

    assert rules(ours) == rules(theirs)
    assert policies(ours) == policies(theirs)


def test_the_comparison_sees_a_difference() -> None:
    """Control: one field changed in the chart's pod spec is a difference after normalising."""
    ours, theirs = pod_specs("base")
    changed = json.loads(json.dumps(ours["template"]["spec"]))
    changed["containers"][0]["args"].append("--log-format=text")
    assert normal(changed) != normal(theirs["template"]["spec"])
    assert normal(ours["template"]["spec"]) == normal(theirs["template"]["spec"])


def test_the_chart_carries_the_gpu_operator_gate_verbatim() -> None:
    """The chart reads its init container from a copy of the gpu-operator component's patch."""
    theirs = ROOT / "deploy" / "kubernetes" / "components" / "gpu-operator" / \
        "toolkit-validation.yaml"
    ours = CHART / "files" / "toolkit-validation.yaml"
    assert ours.read_text() == theirs.read_text(), f"cp {theirs} {ours}"
