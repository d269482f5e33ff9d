"""The container-insights kustomize component: with the cloudwatch component it turns the
Container Insights events on and grants `get` on nodes and `list`/`watch` on services, nothing
more; the container's rendered
args and environment start serve with the profile (parsed as serve parses them)."""

from __future__ import annotations

import json
import re

import kubernetes_validate

from podgpu.config import parse_serve_args
from tests.deploy.render import ROOT, render_with
from tests.deploy.test_manifests import K8S_VERSIONS


def test_component_turns_the_profile_on_and_only_adds_node_get_and_service_list_watch() -> None:
    objs = render_with("overlays/cloudwatch", "container-insights")
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
    roles = {o["metadata"]["name"]: o["rules"] for o in objs if o["kind"] == "ClusterRole"}
    without = {o["metadata"]["name"] for o in render_with("overlays/cloudwatch")
               if o["kind"] == "ClusterRole"}
    # what the component adds, exactly: get on nodes; list and watch on services
    assert {k: v for k, v in roles.items() if k not in without} == {
        "podgpu-node-reader": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        "podgpu-service-reader": [{"apiGroups": [""], "resources": ["services"],
                                   "verbs": ["list", "watch"]}]}
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    for name in ("podgpu-node-reader", "podgpu-service-reader"):
        (binding,) = [o for o in objs if o["kind"] == "ClusterRoleBinding"
                      and o["metadata"]["name"] == name]
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "podgpu",
                                        "namespace": ds["metadata"]["namespace"]}]
    c = ds["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in c["env"]}
    assert env["PODGPU_EMF_CONTAINER_INSIGHTS"] == "true"
    values = {"CLUSTER_NAME": "my-cluster", "EMF_NAMESPACE": env.get("EMF_NAMESPACE", "")}
    args = [re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], ""), a) for a in c["args"]]
    args = [a.replace("/etc/podgpu/cloudwatch/cwagent-config.json", str(
        ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json")) for a in args]
    args = ["/proc" if a == "/host/proc" else a for a in args if a != "serve"]
    s = parse_serve_args(args,
                         {**{k: v for k, v in env.items() if v}, "NODE_NAME": "n1"})
    assert s.emf is not None and s.emf.container_insights and s.emf.cluster_name == "my-cluster"


def test_iam_policy_names_the_performance_log_group_only() -> None:
    doc = json.loads((ROOT / "deploy" / "cloudwatch" /
                      "iam-policy-container-insights.json").read_text())
    resources = {r for st in doc["Statement"] for r in [st["Resource"]]}
    assert resources == {
        "arn:aws:logs:*:*:log-group:/aws/containerinsights/CLUSTER_NAME/performance",
        "arn:aws:logs:*:*:log-group:/aws/containerinsights/CLUSTER_NAME/performance:*"}
    actions = sorted(a for st in doc["Statement"] for a in st["Action"])
    assert actions == ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
