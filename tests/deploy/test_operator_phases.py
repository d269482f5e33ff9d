"""Every shipped overlay's DaemonSet scheduling, rendered with the real `kubectl kustomize`,
evaluated against the node labels each NVIDIA GPU Operator version sets in each phase of its
lifecycle: podgpu runs on ready GPU nodes and steps aside during driver upgrades (with and
without drain), MIG changes, with operands off and on vm-passthrough / vm-vgpu nodes.

The label sets are restated here from the operator's sources, at the tags named:
- github.com/NVIDIA/gpu-operator controllers/state_manager.go (`gpuStateLabels`,
  `gpuClusterStateLabels` in v26.7.0, `updateGPUStateLabels`, `removeAllGPUStateLabels`,
  `getWorkloadConfig`) and deployments/gpu-operator/values.yaml (the driver manager and MIG
  manager versions each operator release runs), at v25.10.1, v26.3.3 and v26.7.0;
- github.com/NVIDIA/k8s-driver-manager cmd/driver-manager/main.go (`evictAllGPUOperatorComponents`,
  `maybeSetPaused`, `waitForPodsToTerminate`, `rescheduleGPUOperatorComponents`,
  `maybeSetTrue`) and internal/kubernetes/client.go (`UpdateNodeLabels`: a strategic merge
  patch, so an empty value is written as an empty label; `WaitForPodsWithNodeSelector`), at
  v0.9.1, v0.11.0 and v0.12.0;
- github.com/NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go
  (`shutdownKubernetesGPUClients`, `maybeSetPaused`, `maybeSetTrue`, `waitForPodsToBeDeleted`)
  at v0.13.1, v0.14.2 and v0.15.0;
- github.com/NVIDIA/k8s-operator-libs pkg/upgrade (the upgrade controller's
  `nvidia.com/gpu-driver-upgrade-state` label; its drain passes IgnoreAllDaemonSets, so it
  never removes podgpu: only the labels above do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.deploy.render import OVERLAYS, compose, one, render

P = "nvidia.com/gpu.deploy."
DRIVER_PAUSE = "paused-for-driver-upgrade"
MIG_PAUSE = "paused-for-mig-change"

# --- what the operator sets on a GPU node (state_manager.go, gpuStateLabels) ---------------
CONTAINER_V25 = {P + k: "true" for k in (
    "driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm",
    "dcgm-exporter", "node-status-exporter", "operator-validator")}
"""The "container" workload configuration's labels, v25.10.1 and v26.3.3 (identical)."""
CONTAINER_V26_7 = {**CONTAINER_V25, P + "client": "true"}
"""v26.7.0 adds nvidia.com/gpu.deploy.client to every workload configuration."""
VM_PASSTHROUGH_V25 = {P + k: "true" for k in (
    "sandbox-device-plugin", "sandbox-validator", "vfio-manager", "kata-manager", "cc-manager")}
VM_VGPU_V25 = {P + k: "true" for k in (
    "sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator",
    "cc-manager")}
DRA_V26_7 = {P + k: "true" for k in (
    "driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")}
"""v26.7.0's GPUCluster (DRA) stack, `gpuClusterStateLabels`; the device-plugin stack's own
keys (the client label among them) are swept off such a node."""
MIG_MANAGER = {P + "mig-manager": "true"}
"""Added on a MIG-capable node in the container configuration."""
GPU_NODE = {"nvidia.com/gpu.present": "true",
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "kubernetes.io/arch": "amd64"}
"""The operator's common GPU label and the NFD label it recognises GPU nodes by."""

# --- what the driver manager rewrites (cmd/driver-manager/main.go) -------------------------
DM_KEYS_V0_9 = tuple(P + k for k in (
    "operator-validator", "container-toolkit", "device-plugin", "gpu-feature-discovery",
    "dcgm-exporter", "dcgm", "nvsm", "sandbox-validator", "sandbox-device-plugin",
    "vgpu-device-manager"))
"""Rewritten unconditionally by v0.9.x to v0.11.0 (an absent one is written as ""); the
mig-manager label only where it has a value."""
DM_KEYS_V0_12 = DM_KEYS_V0_9 + tuple(P + k for k in ("dra-validator", "dcgm-dra",
                                                     "dcgm-exporter-dra"))
"""v0.12.0 adds the DRA operands; the client label and the mig-manager label only where they
have a value, and the DRA driver's own label in a later step (it must outlive its claims)."""


def dm_paused(value: str) -> str:
    """maybeSetPaused of the driver manager."""
    if value in ("", "false") or DRIVER_PAUSE in value:
        return value
    return DRIVER_PAUSE if value == "true" else f"{value}_{DRIVER_PAUSE}"


def dm_restored(value: str) -> str:
    """maybeSetTrue of the driver manager."""
    if value == "false":
        return value
    if value == DRIVER_PAUSE:
        return "true"
    return re.sub(DRIVER_PAUSE + "_?", "", value).strip("_")


def mig_paused(value: str) -> str:
    """maybeSetPaused of the MIG manager: anything but "false" (absent included) is paused."""
    return "false" if value == "false" else MIG_PAUSE


def mig_restored(value: str) -> str:
    return "false" if value == "false" else "true"


MIG_KEYS = tuple(P + k for k in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter",
                                  "dcgm", "nvsm"))
"""shutdownKubernetesGPUClients, v0.13.1 to v0.15.0; v0.15.0 adds the client label where it
has a value."""


@dataclass(frozen=True)
class Operator:
    version: str
    driver_manager: str
    mig_manager: str
    ready: dict[str, str]
    vm_passthrough: dict[str, str]
    vm_vgpu: dict[str, str]
    dra: dict[str, str] | None

    @property
    def client(self) -> bool:
        return P + "client" in self.ready

    def driver_upgrade(self, labels: dict[str, str]) -> dict[str, str]:
        """The node while the driver manager unloads the driver (evictAllGPUOperatorComponents)."""
        keys = DM_KEYS_V0_12 if self.driver_manager == "v0.12.0" else DM_KEYS_V0_9
        out = dict(labels)
        for k in keys:
            out[k] = dm_paused(labels.get(k, ""))
        for k in (P + "mig-manager", *((P + "client",) if self.client else ())):
            if labels.get(k):
                out[k] = dm_paused(labels[k])
        return out

    def driver_back(self, paused: dict[str, str]) -> dict[str, str]:
        """rescheduleGPUOperatorComponents after the unload: "" stays an empty label."""
        return {k: (dm_restored(v) if k.startswith(P) else v) for k, v in paused.items()}

    def mig_change(self, labels: dict[str, str]) -> dict[str, str]:
        out = dict(labels)
        for k in MIG_KEYS:
            out[k] = mig_paused(labels.get(k, ""))
        if self.mig_manager == "v0.15.0" and labels.get(P + "client"):
            out[P + "client"] = mig_paused(labels[P + "client"])
        out["nvidia.com/mig.config.state"] = "pending"
        return out

    def mig_back(self, paused: dict[str, str]) -> dict[str, str]:
        keys = (*MIG_KEYS, *((P + "client",) if self.mig_manager == "v0.15.0" else ()))
        return {**{k: (mig_restored(v) if k in keys else v) for k, v in paused.items()},
                "nvidia.com/mig.config.state": "success"}


OPERATORS = (
    Operator("v25.10", "v0.9.1", "v0.13.1", CONTAINER_V25, VM_PASSTHROUGH_V25, VM_VGPU_V25,
             None),
    Operator("v26.3", "v0.11.0", "v0.14.2", CONTAINER_V25, VM_PASSTHROUGH_V25, VM_VGPU_V25,
             None),
    Operator("v26.7", "v0.12.0", "v0.15.0", CONTAINER_V26_7,
             {**VM_PASSTHROUGH_V25, P + "client": "true"},
             {**VM_VGPU_V25, P + "client": "true"}, DRA_V26_7),
)
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"


def phases(op: Operator) -> dict[str, tuple[dict[str, str], str]]:
    """Phase name -> (node labels, the kind of node it is while in that phase): "ready"
    (a container-workload node podgpu should run on), "dra-ready", or "away" (podgpu must
    not run there)."""
    ready = {**GPU_NODE, **op.ready}
    mig_node = {**ready, **MIG_MANAGER, "nvidia.com/mig.capable": "true"}
    upgrading = op.driver_upgrade(ready)
    mig = op.mig_change(mig_node)
    out = {
        "ready": (ready, "ready"),
        "ready, MIG-capable": (mig_node, "ready"),
        "driver upgrade, no drain": (upgrading, "away"),
        "driver upgrade, upgrade controller draining": (
            {**upgrading, UPGRADE_STATE: "pod-restart-required"}, "away"),
        "after the driver upgrade": (op.driver_back(upgrading), "ready"),
        "upgrade controller validating": (
            {**op.driver_back(upgrading), UPGRADE_STATE: "validation-required"}, "ready"),
        "MIG change": (mig, "away"),
        "after the MIG change": (op.mig_back(mig), "ready"),
        "driver upgrade during a MIG change": (op.driver_upgrade(mig), "away"),
        "MIG change after a driver upgrade": (
            op.mig_change({**op.driver_back(op.driver_upgrade(mig_node))}), "away"),
        "operands off": ({**GPU_NODE, P + "operands": "false"}, "away"),
        "vm-passthrough, labelled": (
            {**GPU_NODE, **op.vm_passthrough, "nvidia.com/gpu.workload.config": "vm-passthrough"},
            "away"),
        "vm-vgpu, labelled": (
            {**GPU_NODE, **op.vm_vgpu, "nvidia.com/gpu.workload.config": "vm-vgpu"}, "away"),
        "vm-passthrough by the ClusterPolicy default": (
            {**GPU_NODE, **op.vm_passthrough}, "away"),
        "vm-vgpu by the ClusterPolicy default": ({**GPU_NODE, **op.vm_vgpu}, "away"),
        "vm-passthrough, driver upgrade": (
            op.driver_upgrade({**GPU_NODE, **op.vm_passthrough}), "away"),
    }
    if op.dra is not None:
        dra = {**GPU_NODE, **op.dra}
        dra_upgrading = op.driver_upgrade(dra)
        out |= {"DRA node": (dra, "dra-ready"),
                "DRA node, driver upgrade": (dra_upgrading, "away"),
                "DRA node, after the driver upgrade": (op.driver_back(dra_upgrading),
                                                      "dra-ready")}
    return out


CASES = [(op.version, name) for op in OPERATORS for name in phases(op)]
BY_VERSION = {op.version: op for op in OPERATORS}

NO_OPERATOR = {
    "eksctl g5": ({"node.kubernetes.io/instance-type": "g5.2xlarge"}, True),
    "EKS Auto Mode": ({"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"}, True),
    "NFD only": ({"feature.node.kubernetes.io/pci-10de.present": "true"}, True),
    "CPU node": ({"node.kubernetes.io/instance-type": "m5.xlarge"}, False),
}


# --- Kubernetes' scheduling semantics ------------------------------------------------------
def expression_matches(e: dict[str, Any], labels: dict[str, str]) -> bool:
    """One NodeSelectorRequirement as k8s.io/component-helpers/scheduling/corev1/nodeaffinity
    evaluates it: In / Exists need the label; NotIn / DoesNotExist match when it is absent;
    an empty value is a present label."""
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
    """The nodeSelector (every pair) AND the required node affinity (any term, every
    expression of it). The DaemonSet controller uses the same test to delete a pod whose node
    no longer matches, so "does not schedule" is also "is removed"."""
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
    """Control: NotIn and DoesNotExist match an absent label, an empty value is present, In
    does not match an absent label; terms are ORed, the nodeSelector ANDed."""
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


def test_the_restated_managers_behave_as_their_sources_say() -> None:
    """Control on the model: the driver manager pauses "true", keeps "false", stamps "" on an
    absent key and appends its mark to a foreign value; the MIG manager pauses an absent key."""
    op = BY_VERSION["v26.7"]
    up = op.driver_upgrade({**GPU_NODE, **op.ready})
    assert up[P + "dcgm-exporter"] == up[P + "client"] == DRIVER_PAUSE
    assert up[P + "sandbox-validator"] == ""
    assert op.driver_back(up)[P + "client"] == "true"
    assert dm_paused(MIG_PAUSE) == f"{MIG_PAUSE}_{DRIVER_PAUSE}"
    assert dm_restored(f"{MIG_PAUSE}_{DRIVER_PAUSE}") == MIG_PAUSE
    assert op.mig_change({})[P + "dcgm-exporter"] == MIG_PAUSE
    old = BY_VERSION["v26.3"]
    assert P + "client" not in old.driver_upgrade({**GPU_NODE, **old.ready})


# --- what each shipped overlay must do ----------------------------------------------------
SHIPPED = OVERLAYS
FOLLOWS_EXPORTER = {"overlays/dcgm-exporter-migration"}
"""Selects nodes exactly as the operator's own exporter: container-workload nodes only."""
CLIENT_KEYED = {"overlays/gpu-operator"}
"""Carries the client key in its nodeSelector: v26.7 and later only."""


def expected(overlay: str, op: Operator, kind: str) -> bool:
    if kind == "away":
        return False
    if overlay in CLIENT_KEYED:
        return op.client and kind == "ready"
    if overlay in FOLLOWS_EXPORTER:
        return kind == "ready"
    return True


@pytest.mark.parametrize("overlay", SHIPPED)
@pytest.mark.parametrize(("version", "phase"), CASES, ids=[f"{v}-{p}" for v, p in CASES])
def test_every_overlay_follows_the_operator_phase(overlay: str, version: str,
                                                   phase: str) -> None:
    op = BY_VERSION[version]
    labels, kind = phases(op)[phase]
    pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
    assert schedules(pod, labels) is expected(overlay, op, kind), (overlay, version, phase,
                                                                   labels)


@pytest.mark.parametrize("overlay", SHIPPED)
@pytest.mark.parametrize("node", NO_OPERATOR)
def test_without_the_operator(overlay: str, node: str) -> None:
    """Overlays for GPU Operator clusters run nowhere else; the others on any GPU node."""
    labels, gpu = NO_OPERATOR[node]
    pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
    want = gpu and overlay not in FOLLOWS_EXPORTER | CLIENT_KEYED
    assert schedules(pod, labels) is want, (overlay, node)


# --- who waits for podgpu -----------------------------------------------------------------
OPERATOR_NAMESPACE = "gpu-operator"
"""The namespace of the operator's Helm install in its documentation; the managers look for
its operands' pods by `app` label there (OPERATOR_NAMESPACE / DefaultGPUClientsNamespace)."""
WAITED_APP_LABELS = {
    "driver manager": {"nvidia-operator-validator", "nvidia-container-toolkit-daemonset",
                       "nvidia-device-plugin-daemonset", "gpu-feature-discovery",
                       "nvidia-dcgm-exporter", "nvidia-dcgm"},
    "MIG manager": {"nvidia-device-plugin-daemonset", "gpu-feature-discovery",
                    "nvidia-dcgm-exporter", "nvidia-dcgm"},
}
"""The `app` labels waited for (5 minutes each) by every version here: waitForPodsToTerminate
(driver manager v0.9.1 to v0.12.0), waitForPodsToBeDeleted (MIG manager v0.13.1 to v0.15.0)."""


def waited_for(pod_meta: dict[str, Any], pod: dict[str, Any], op: Operator) -> bool:
    """Whether both managers of `op` wait for this pod before unloading / repartitioning."""
    by_app = (pod_meta["namespace"] == OPERATOR_NAMESPACE
              and pod_meta["labels"].get("app") in WAITED_APP_LABELS["driver manager"]
              & WAITED_APP_LABELS["MIG manager"])
    by_client_key = op.client and P + "client" in (pod.get("nodeSelector") or {})
    return by_app or by_client_key


@pytest.mark.parametrize("version", [op.version for op in OPERATORS])
@pytest.mark.parametrize("overlay", sorted(FOLLOWS_EXPORTER | CLIENT_KEYED))
def test_the_managers_wait_for_podgpu_in_every_overlay_for_operator_clusters(
        overlay: str, version: str) -> None:
    """Where the overlay runs on an operator's node at all, that operator's managers wait for
    its pod: and the pod leaves, since the label the managers pause is one it selects on."""
    op = BY_VERSION[version]
    ds = one(render(overlay), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    meta = {**ds["spec"]["template"]["metadata"], "namespace": ds["metadata"]["namespace"]}
    if not expected(overlay, op, "ready"):
        return  # it never runs there (v25.10 / v26.3 for the client-keyed overlay)
    assert waited_for(meta, pod, op), (overlay, version)


def test_a_pod_in_another_namespace_is_not_waited_for() -> None:
    """Control: the app label alone, outside the operator's namespace, is not waited for."""
    meta = {"namespace": "podgpu", "labels": {"app": "nvidia-dcgm-exporter"}}
    assert not waited_for(meta, {}, BY_VERSION["v26.3"])
    assert waited_for(meta, {"nodeSelector": {P + "client": "true"}}, BY_VERSION["v26.7"])


# --- podgpu comes back when the driver is ready -------------------------------------------
GATE_FILE = "/run/nvidia/validations/toolkit-ready"
"""Written by the operator's validator (cmd/nvidia-validator/main.go, toolkitStatusFile),
waited for by the operator's exporter's toolkit-validation init container
(assets/state-dcgm-exporter/0800_daemonset.yaml). Beside it the validator's driver-ready
(IS_HOST_DRIVER=...) and the driver container's .driver-ctr-ready (assets/state-driver: its
startup probe writes it, its preStop deletes it); the gate's behaviour on them is run in the
image by tests/deploy/test_image_packages.py."""


@pytest.mark.parametrize("overlay", sorted(FOLLOWS_EXPORTER | CLIENT_KEYED))
def test_overlays_for_operator_clusters_wait_for_the_validated_driver(overlay: str) -> None:
    objs = render(overlay)
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    (gate,) = pod["initContainers"]
    (main,) = pod["containers"]
    assert gate["image"] == main["image"]  # one `images:` entry sets both
    script = gate["args"][0]
    directory, name = GATE_FILE.rsplit("/", 1)
    assert f'd = "{directory}"' in script
    assert all(f in script for f in (name, "driver-ready", ".driver-ctr-ready"))
    env = {e["name"]: e["value"] for e in gate["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # no driver injected before it exists
    (mount,) = gate["volumeMounts"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert GATE_FILE.startswith(vol["hostPath"]["path"] + "/")
    assert GATE_FILE.startswith(mount["mountPath"] + "/") and mount["readOnly"] is True
    sc = gate["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False


def test_generic_overlays_have_no_gate() -> None:
    """Without the operator the file never appears: the generic overlays must not wait for it."""
    for overlay in set(SHIPPED) - FOLLOWS_EXPORTER - CLIENT_KEYED:
        pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
        assert "initContainers" not in pod, overlay


def test_the_gate_is_one_init_container_however_often_it_is_listed() -> None:
    objs = compose(("namespace", "gpu-operator", "gpu-operator-client"))
    pod = one(list(objs), "DaemonSet")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation"]
    assert [v["name"] for v in pod["volumes"]].count("run-nvidia") == 1
