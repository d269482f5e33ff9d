"""The manifests live with the NVIDIA GPU Operator's lifecycle and compose as one deployment:

- the rendered DaemonSet's scheduling (node affinity, and the nodeSelector of the
  gpu-operator-client component) evaluated against the labels a node carries in each phase of
  the operator's driver upgrades and MIG changes;
- every combination of the components renders with the real `kubectl kustomize`, validates
  against the Kubernetes and prometheus-operator schemas, and has one DaemonSet, at most one
  scrape job per node, and a binding naming the ServiceAccount the pods run as;
- re-homing with kustomize's `namespace:` and `nameSuffix:` keeps the binding, the
  ServiceMonitor and Pod Security right, and two installs share no cluster-scoped name;
- the CloudWatch component's rendered args and env give Namespace=gpu-operator on a simulated
  node, and an empty cluster name stops podgpu with exit 2 naming --cluster-name.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.contract import prepare
from tests.deploy.render import ROOT, build, compose, container, one, render
from tests.deploy.test_manifests import K8S_VERSIONS, servicemonitor_validator
from tests.integration.kubelet_fake import socket_path

FIXTURES = ROOT / "tests" / "fixtures"

# --- the GPU Operator's node labels, phase by phase ---------------------------------------
# Restated from the operator's sources (github.com/NVIDIA/gpu-operator controllers/
# state_manager.go; github.com/NVIDIA/k8s-driver-manager cmd/driver-manager/main.go;
# github.com/NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go):
# - on a GPU node in the default "container" workload configuration the operator sets
#   nvidia.com/gpu.deploy.<operand>=true for each operand, and, from v26.7,
#   nvidia.com/gpu.deploy.client=true for third-party GPU clients;
# - the driver manager, before unloading the driver, rewrites each of these labels that is
#   "true" to "paused-for-driver-upgrade" (the client label only if the node has it), waits
#   until DaemonSet pods whose nodeSelector has the client key are gone, and after the new
#   driver is loaded rewrites them back to "true";
# - the MIG manager does the same with "paused-for-mig-change" around a MIG reconfiguration;
#   a label that is "false" stays "false" in both;
# - nvidia.com/gpu.deploy.operands=false on a node makes the operator remove every
#   nvidia.com/gpu.deploy.* label there (the client label included: "absent" is not "on");
# - nodes labelled nvidia.com/gpu.workload.config=vm-passthrough or vm-vgpu get the sandbox
#   operands and also nvidia.com/gpu.deploy.client=true, but no driver for host containers.
GPU = {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64"}
CONTAINER_OPERANDS = {f"nvidia.com/gpu.deploy.{o}": "true" for o in (
    "driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm",
    "dcgm-exporter", "node-status-exporter", "operator-validator", "mig-manager")}


def paused(labels: dict[str, str], value: str) -> dict[str, str]:
    return {k: (value if k.startswith("nvidia.com/gpu.deploy.") and v == "true" else v)
            for k, v in labels.items()}


READY = {**GPU, **CONTAINER_OPERANDS, "nvidia.com/gpu.deploy.client": "true"}
PHASES: dict[str, tuple[dict[str, str], bool]] = {
    "ready (operator v26.7+)": (READY, True),
    "paused-for-driver-upgrade": (paused(READY, "paused-for-driver-upgrade"), False),
    "paused-for-mig-change": (paused(READY, "paused-for-mig-change"), False),
    # a driver upgrade while a MIG change holds the label: the driver manager appends its mark
    "mig change, then driver upgrade": (
        {**paused(READY, "paused-for-mig-change"),
         "nvidia.com/gpu.deploy.client": "paused-for-mig-change_paused-for-driver-upgrade"},
        False),
    "back after the upgrade": (READY, True),
    "operands off": ({**GPU, "nvidia.com/gpu.deploy.operands": "false"}, False),
    "vm-passthrough": ({**GPU, "nvidia.com/gpu.workload.config": "vm-passthrough",
                        "nvidia.com/gpu.deploy.client": "true",
                        "nvidia.com/gpu.deploy.vfio-manager": "true",
                        "nvidia.com/gpu.deploy.sandbox-device-plugin": "true"}, False),
    "vm-vgpu": ({**GPU, "nvidia.com/gpu.workload.config": "vm-vgpu",
                 "nvidia.com/gpu.deploy.client": "true",
                 "nvidia.com/gpu.deploy.vgpu-manager": "true"}, False),
    "container workload, explicit": ({**READY, "nvidia.com/gpu.workload.config": "container"},
                                     True),
    "older operator (no client label)": ({**GPU, **CONTAINER_OPERANDS}, True),
    "older operator, paused-for-driver-upgrade": (
        paused({**GPU, **CONTAINER_OPERANDS}, "paused-for-driver-upgrade"), True),
    "operator client label false": ({**READY, "nvidia.com/gpu.deploy.client": "false"}, False),
    "no operator (eksctl g5)": ({"node.kubernetes.io/instance-type": "g5.2xlarge"}, True),
    "no operator, CPU node": ({"node.kubernetes.io/instance-type": "m5.xlarge"}, False),
}
"""Label set -> whether podgpu should run there. With an older operator (no client label) the
operator cannot ask podgpu to step aside: it runs through the upgrade, as before."""


def expression_matches(e: dict[str, Any], labels: dict[str, str]) -> bool:
    """One NodeSelectorRequirement, as Kubernetes evaluates it (k8s.io/component-helpers
    nodeaffinity): In / Exists need the label; NotIn / DoesNotExist match when it is absent."""
    have = labels.get(e["key"])
    op = e["operator"]
    if op == "In":
        return have is not None and have in e["values"]
    if op == "NotIn":
        return have is None or have not in e["values"]
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    raise AssertionError(f"operator {op} not evaluated here")


def schedules(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """The pod's nodeSelector (every pair) AND its required node affinity (any term, every
    expression of it); empty terms match nothing."""
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    req = pod.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if req is None:
        return True
    return any(t.get("matchExpressions") and all(expression_matches(e, labels)
                                                 for e in t["matchExpressions"])
               for t in req["nodeSelectorTerms"])


def test_the_evaluator_follows_kubernetes_semantics() -> None:
    """Control: NotIn and DoesNotExist match an absent label, In does not; terms are ORed."""
    pod = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]},
                                  {"key": "b", "operator": "NotIn", "values": ["x"]}]},
            {"matchExpressions": [{"key": "c", "operator": "DoesNotExist"},
                                  {"key": "d", "operator": "Exists"}]}]}}}}
    assert schedules(pod, {"a": "1"}) and not schedules(pod, {"a": "1", "b": "x"})
    assert schedules(pod, {"d": ""}) and not schedules(pod, {"c": "", "d": ""})
    assert not schedules(pod, {})
    assert not schedules({**pod, "nodeSelector": {"z": "1"}}, {"a": "1"})


@pytest.mark.parametrize("overlay", ["base", "overlays/prometheus-cloudwatch",
                                     "overlays/dcgm-exporter-migration"])
@pytest.mark.parametrize("phase", PHASES)
def test_rendered_affinity_steps_aside_in_each_operator_phase(overlay: str, phase: str) -> None:
    labels, expected = PHASES[phase]
    pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
    assert schedules(pod, labels) is expected, (overlay, phase, labels)


@pytest.mark.parametrize("phase", PHASES)
def test_gpu_operator_client_component_keys_the_node_selector(phase: str) -> None:
    """With the component the nodeSelector carries the key the driver manager and MIG manager
    wait on; podgpu then runs only where the label is "true" (operator v26.7+)."""
    labels, expected = PHASES[phase]
    pod = one(compose(("namespace", "gpu-operator-client")), "DaemonSet")["spec"]["template"][
        "spec"]
    assert "nvidia.com/gpu.deploy.client" in pod["nodeSelector"]
    wanted = expected and labels.get("nvidia.com/gpu.deploy.client") == "true"
    assert schedules(pod, labels) is wanted, (phase, labels)


# --- every combination ---------------------------------------------------------------------
ENV = ("podgpu-cloudwatch-env", ("CLUSTER_NAME=my-cluster", "AWS_REGION=us-east-1"))
IRSA = ("podgpu-irsa", ("ROLE_ARN=arn:aws:iam::111122223333:role/podgpu-cloudwatch",))
CREDENTIALS = {"pod-identity": ("cloudwatch-pod-identity",), "irsa": ("cloudwatch-irsa",),
               "node-role": ("node-role-credentials",)}


def combinations() -> list[tuple[tuple[str, ...], bool]]:
    """(components in the documented order, migration?) for every subset of prometheus,
    cloudwatch (with each credential choice), migration and tls."""
    out = []
    for prom, cw, mig, tls in itertools.product((False, True), repeat=4):
        for cred in (CREDENTIALS if cw else {"": ()}):
            comps: list[str] = [] if mig else ["namespace"]
            comps += ["prometheus"] if prom else []
            comps += ["cloudwatch", *CREDENTIALS[cred]] if cw else []
            comps += ["dcgm-exporter-migration"] if mig else []
            comps += ["tls"] if tls else []
            out.append((tuple(comps), mig))
    return out


def composed(comps: tuple[str, ...], mig: bool) -> tuple[dict[str, Any], ...]:
    maps = (ENV,) if "cloudwatch" in comps else ()
    maps += (IRSA,) if "cloudwatch-irsa" in comps else ()
    if mig:
        return compose(comps, namespace="gpu-operator", name_suffix="-gpu-operator",
                       config_maps=maps)
    return compose(comps, config_maps=maps)


@pytest.mark.parametrize(("comps", "mig"), combinations(), ids=lambda c: "+".join(c)
                         if isinstance(c, tuple) else "")
def test_every_combination_renders_validates_and_is_one_deployment(
        comps: tuple[str, ...], mig: bool) -> None:
    objs = composed(comps, mig)
    for obj in objs:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            errors = [f"{list(e.path)}: {e.message}"
                      for e in servicemonitor_validator().iter_errors(obj)]
            assert errors == [], errors
        else:
            kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
    ds = one(list(objs), "DaemonSet")  # exactly one exporter per node
    pod = ds["spec"]["template"]["spec"]
    ns = ds["metadata"]["namespace"]
    assert ns == ("gpu-operator" if mig else "podgpu")
    # The binding names the ServiceAccount the pods run as, in their namespace, and the role.
    sa = one(list(objs), "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"] and sa["metadata"]["namespace"] == ns
    (subject,) = one(list(objs), "ClusterRoleBinding")["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["metadata"]["name"], ns)
    assert one(list(objs), "ClusterRoleBinding")["roleRef"]["name"] == one(
        list(objs), "ClusterRole")["metadata"]["name"]
    # One scrape job per node: one ServiceMonitor (or none), selecting the one Service in its
    # namespace by a port the Service has.
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == (1 if "prometheus" in comps else 0)
    svc = one(list(objs), "Service")
    for sm in monitors:
        assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] == ns
        assert "namespaceSelector" not in sm["spec"]  # its own namespace, wherever that is
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"][
            "labels"].items()
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] in [p["name"] for p in svc["spec"]["ports"]]
        if "tls" in comps:
            assert ep["scheme"] == "https"
            assert ep["tlsConfig"]["ca"] == {"secret": {"name": "podgpu-web-config",
                                                        "key": "ca.crt"}}
            assert ep["tlsConfig"]["serverName"] == "podgpu"
        else:
            assert ep["scheme"] == "http" and "tlsConfig" not in ep
        if mig:
            assert (sm["spec"]["jobLabel"], ep["port"], ep["interval"], ep["honorLabels"]) == (
                "app", "gpu-metrics", "15s", False)
    schemes = {container(list(objs))[p]["httpGet"]["scheme"]
               for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert schemes == ({"HTTPS"} if "tls" in comps else {"HTTP"})
    # Pod Security: only podgpu's own namespace is created and labelled.
    namespaces = [o for o in objs if o["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == ([] if mig else ["podgpu"])
    args = container(list(objs))["args"]
    assert ("--cloudwatch-config" in args) == ("cloudwatch" in comps)
    annotations = sa["metadata"].get("annotations", {})
    assert ("eks.amazonaws.com/role-arn" in annotations) == ("cloudwatch-irsa" in comps)


def test_the_seeds_setup_is_one_overlay() -> None:
    """Prometheus and CloudWatch together: one `kubectl apply -k`, one DaemonSet that serves
    the ServiceMonitor's scrape and sends EMF."""
    objs = render("overlays/prometheus-cloudwatch")
    ds = one(objs, "DaemonSet")
    assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == "1s"
    args = container(objs)["args"]
    assert "--cloudwatch-config" in args and ds["metadata"]["name"] == "podgpu"
    assert sum(o["kind"] == "DaemonSet" for o in objs) == 1


def test_a_component_listed_twice_fails_to_render() -> None:
    """A component listed twice is refused by kustomize, not rendered as two exporters."""
    out = build(("namespace", "prometheus", "prometheus"))
    assert out.returncode != 0


def test_rehoming_keeps_binding_servicemonitor_and_pod_security_right() -> None:
    """docs/deploy.md's recipe for another namespace: base and components, `namespace:` and
    `nameSuffix:`, no namespace component (the namespace is the user's)."""
    objs = compose(("prometheus", "cloudwatch", "cloudwatch-pod-identity", "tls"),
                   namespace="team-gpu", name_suffix="-team-gpu", config_maps=(ENV,))
    assert not [o for o in objs if o["kind"] == "Namespace"]  # nothing stamps Pod Security
    namespaced = [o for o in objs if o["kind"] not in ("ClusterRole", "ClusterRoleBinding")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"team-gpu"}
    sa = one(list(objs), "ServiceAccount")
    (subject,) = one(list(objs), "ClusterRoleBinding")["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["metadata"]["name"], "team-gpu")
    assert one(list(objs), "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == \
        sa["metadata"]["name"]
    sm = one(list(objs), "ServiceMonitor")
    assert "namespaceSelector" not in sm["spec"] and sm["metadata"]["namespace"] == "team-gpu"
    # A second install shares no cluster-scoped name with the default one.
    default = render("overlays/prometheus-cloudwatch")
    cluster_names = {(o["kind"], o["metadata"]["name"]) for o in default
                     if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace")}
    mine = {(o["kind"], o["metadata"]["name"]) for o in objs
            if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace")}
    assert mine and not mine & cluster_names
    migration = render("overlays/dcgm-exporter-migration")
    theirs = {(o["kind"], o["metadata"]["name"]) for o in migration
              if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace")}
    assert theirs and not theirs & cluster_names


def test_the_namespace_component_is_what_stamps_privileged() -> None:
    (ns,) = [o for o in render("overlays/prometheus-operator") if o["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert not [o for o in render("base") if o["kind"] == "Namespace"]


def test_irsa_needs_the_role_arn_and_pod_identity_adds_no_annotation() -> None:
    out = build(("namespace", "cloudwatch", "cloudwatch-irsa"), config_maps=(ENV,))
    assert out.returncode != 0 and "podgpu-irsa" in out.stderr and "ROLE_ARN" in out.stderr
    objs = compose(("namespace", "cloudwatch", "cloudwatch-irsa"), config_maps=(ENV, IRSA))
    assert one(list(objs), "ServiceAccount")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/podgpu-cloudwatch"}
    pi = render("overlays/cloudwatch")
    assert not one(pi, "ServiceAccount")["metadata"].get("annotations")
    assert [o for o in pi if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "podgpu-aws"]


def test_no_image_that_does_not_exist_and_an_images_block_sets_yours() -> None:
    """Nothing is published: the default reference is in the reserved .invalid domain (it
    never resolves, and the pull error names it); an overlay's own `images:` replaces it."""
    for overlay in ("base", "overlays/prometheus-cloudwatch", "overlays/dcgm-exporter-migration"):
        image = container(render(overlay))["image"]
        assert image.split("/")[0].endswith(".invalid"), image
    mine = "111122223333.dkr.ecr.us-east-1.amazonaws.com/podgpu:0.1.0"
    objs = compose(("namespace", "prometheus"),
                   images=(("podgpu-image-not-set.invalid/podgpu", mine),))
    assert container(list(objs))["image"] == mine


# --- the CloudWatch component on a simulated node ----------------------------------------
def launch_rendered(objs: list[dict[str, Any]], tmp_path: Path
                    ) -> tuple[list[str], dict[str, str]]:
    """The DaemonSet container's args and env (contract.prepare), without the kubelet and API
    flags a laptop has no use for."""
    with socket_path() as sock:
        launch = prepare(objs, tmp_path, pod_resources_dir=Path(sock).parent,
                         proc_fixture=FIXTURES / "proc")
    args = [a for a in launch.args if a != "--kubernetes"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1",
           **launch.env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    return [sys.executable, "-m", "podgpu", *args], env


def test_cloudwatch_component_sends_namespace_gpu_operator(tmp_path: Path) -> None:
    """The agent path labelled every series with the exporter's namespace (gpu-operator), and
    the migrated dashboards and alarms look for it: the rendered args and env give the same,
    though podgpu runs in namespace podgpu (POD_NAMESPACE from the downward API)."""
    objs = list(compose(("namespace", "cloudwatch", "cloudwatch-pod-identity"),
                        config_maps=(ENV,)))
    cmd, env = launch_rendered(objs, tmp_path)
    assert env["POD_NAMESPACE"] == "podgpu"  # where it runs: not what the agent path sent
    proc = subprocess.Popen([*cmd, "--simulate", "2",
                             "--emf-destination", "stdout", "--emf-interval", "1",
                             "--address", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(60, proc.kill)  # only if no EMF document ever comes
    guard.start()
    docs: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # one EMF document per line, every second
            if line.startswith("{") and "_aws" in line:
                docs.append(json.loads(line))
            if len(docs) >= 4:
                break
    finally:
        guard.cancel()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert docs, err[-2000:]
    assert {d["Namespace"] for d in docs} == {"gpu-operator"}
    assert {d["ClusterName"] for d in docs} == {"my-cluster"}
    assert {d["Service"] for d in docs} == {"nvidia-dcgm-exporter"}
    # the agent path's labels of the operator's exporter: its container, its Service's app label
    assert {d["container_name"] for d in docs} == {"nvidia-dcgm-exporter"}
    assert {d["app"] for d in docs} == {"nvidia-dcgm-exporter"}


def test_an_empty_cluster_name_stops_podgpu_with_one_line(tmp_path: Path) -> None:
    """The shipped example as it is (CLUSTER_NAME empty): exit 2, one line naming the flag."""
    cmd, env = launch_rendered(render("overlays/cloudwatch"), tmp_path)
    assert cmd[cmd.index("--cluster-name") + 1] == ""
    out = subprocess.run([*cmd, "--simulate", "1", "--address", "127.0.0.1:0"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--cluster-name" in lines[0], lines
