"""The manifests compose as one deployment (the scheduling against the GPU Operator's node
labels, version by version and phase by phase, is tests/deploy/test_operator_phases.py):

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

import pytest
import yaml

from tests.deploy.contract import prepare
from tests.deploy.render import (
    OVERLAYS,
    ROOT,
    build,
    compose,
    container,
    one,
    render,
    validate_strict,
)
from tests.deploy.test_manifests import K8S_VERSIONS, servicemonitor_validator
from tests.integration.kubelet_fake import socket_path

FIXTURES = ROOT / "tests" / "fixtures"

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
    maps: tuple[tuple[str, tuple[str, ...]], ...] = (ENV,) if "cloudwatch" in comps else ()
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
            validate_strict(obj, K8S_VERSIONS[-1])
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


PSA = "pod-security.kubernetes.io/"


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "base"])
def test_rehoming_a_shipped_overlay_never_lowers_pod_security(overlay: str) -> None:
    """Re-homed with `namespace:`, kustomize renames the overlay's Namespace to the target: what
    it renders must not enforce a level (an `enforce: privileged` would lower the target's on
    apply) and may warn/audit only at the strictest level."""
    objs = compose((), resources=(overlay,), namespace="team-gpu", name_suffix="-team-gpu")
    for ns in [o for o in objs if o["kind"] == "Namespace"]:
        labels = ns["metadata"].get("labels", {})
        assert f"{PSA}enforce" not in labels, (overlay, labels)
        assert {v for k, v in labels.items() if k.startswith(PSA)} <= {"restricted"}, labels
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] == "DaemonSet"} == {
        "team-gpu"}


def test_the_namespace_component_enforces_nothing() -> None:
    (ns,) = [o for o in render("overlays/prometheus-operator") if o["kind"] == "Namespace"]
    labels = ns["metadata"]["labels"]
    assert labels == {f"{PSA}warn": "restricted", f"{PSA}audit": "restricted"}
    assert not [o for o in render("base") if o["kind"] == "Namespace"]


def spool_on_host(objs: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> str:
    """The host directory the EMF spool lands in: the hostPath plus the mount's subPathExpr
    with the pod's namespace (the only variable it uses) filled in, as the kubelet does."""
    ds = one(list(objs), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == "emf-spool"]
    (mount,) = [m for m in container(list(objs))["volumeMounts"] if m["name"] == "emf-spool"]
    sub = mount.get("subPathExpr", mount.get("subPath", ""))
    env = {e["name"]: e for e in container(list(objs))["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    sub = sub.replace("$(POD_NAMESPACE)", ds["metadata"]["namespace"])
    assert "$(" not in sub, sub
    return f"{vol['hostPath']['path']}/{sub}".rstrip("/")


def test_a_second_install_gets_its_own_spool() -> None:
    first = compose(("namespace", "cloudwatch", "cloudwatch-pod-identity"), config_maps=(ENV,))
    second = compose(("cloudwatch", "cloudwatch-pod-identity"), namespace="team-gpu",
                     name_suffix="-team-gpu", config_maps=(ENV,))
    migration = compose(("cloudwatch", "dcgm-exporter-migration"), namespace="gpu-operator",
                        name_suffix="-gpu-operator", config_maps=(ENV,))
    dirs = [spool_on_host(o) for o in (first, second, migration)]
    assert dirs == ["/var/lib/podgpu/podgpu/emf-spool", "/var/lib/podgpu/team-gpu/emf-spool",
                    "/var/lib/podgpu/gpu-operator/emf-spool"]
    # inside the container the path podgpu is given is the mount point
    args = container(list(first))["args"]
    assert args[args.index("--emf-spool-dir") + 1] == "/var/lib/podgpu/emf-spool"


SM_SHAPERS = ("prometheus", "dcgm-exporter-migration", "tls")
"""Components that create or change the ServiceMonitor, in the one order that works."""


@pytest.mark.parametrize("order", list(itertools.permutations(SM_SHAPERS)),
                         ids=lambda o: ">".join(o))
def test_a_wrong_component_order_fails_to_render(order: tuple[str, ...]) -> None:
    """Listed in another order, prometheus, dcgm-exporter-migration and tls would render a
    ServiceMonitor one of them never saw, with exit 0: every other order fails instead (and
    the pairs too)."""
    for n in (2, 3):
        comps = order[:n]
        want = [c for c in SM_SHAPERS if c in comps]
        out = build(comps, namespace="gpu-operator", name_suffix="-gpu-operator")
        assert (out.returncode == 0) == (list(comps) == want), (comps, out.stderr[-500:])
        if out.returncode != 0:
            assert "test failed" in out.stderr and "components/" in out.stderr, out.stderr


def test_irsa_needs_the_role_arn_and_pod_identity_adds_no_annotation() -> None:
    out = build(("namespace", "cloudwatch", "cloudwatch-irsa"), config_maps=(ENV,))
    assert out.returncode != 0 and "podgpu-irsa" in out.stderr and "ROLE_ARN" in out.stderr
    objs = compose(("namespace", "cloudwatch", "cloudwatch-irsa"), config_maps=(ENV, IRSA))
    assert one(list(objs), "ServiceAccount")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/podgpu-cloudwatch"}
    pi = render("overlays/cloudwatch")
    assert not one(pi, "ServiceAccount")["metadata"].get("annotations")
    assert [o for o in pi if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "podgpu-aws"]


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "base"])
def test_the_examples_images_comment_works_as_copied(overlay: str) -> None:
    """Each example's header says how to set your image: that `images:` line, copied into a
    kustomization over the example, sets every container's image (the gate's included)."""
    text = (ROOT / "deploy" / "kubernetes" / overlay / "kustomization.yaml").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("#") and "images:" in ln]
    (entry,) = yaml.safe_load(line.lstrip("#").strip())["images"]
    mine = f"{entry['newName']}:{entry['newTag']}"
    objs = compose((), resources=(overlay,), namespace=None, images=((entry["name"], mine),))
    pod = one(list(objs), "DaemonSet")["spec"]["template"]["spec"]
    images = {c["image"] for c in (*pod["containers"], *pod.get("initContainers", []))}
    assert images == {mine}, (overlay, images)


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
