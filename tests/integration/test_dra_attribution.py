"""--kubernetes-enable-dra against the real gRPC kubelet stand-in serving `dynamic_resources`:
NVIDIA DRA GPUs carry pod labels like device-plugin GPUs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podgpu.attribution.attributor import KubeletAttributor, build_attributor
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.settings import KubernetesSettings
from tests.integration.kubelet_fake import (
    DEVICES,
    GPUS,
    MIG,
    FakeClaim,
    FakeContainer,
    FakeKubelet,
    FakePod,
    wait_for,
)

DRIVER = "gpu.nvidia.com"


@pytest.fixture
def dra_kubelet(sock: str) -> Iterator[FakeKubelet]:
    k = FakeKubelet(sock).start()
    shared = FakeClaim("shared-gpu", "ml", [(DRIVER, "node-1", "gpu-1")])
    k.set_pods([
        FakePod("ml", "train", [FakeContainer("main", claims=[
            FakeClaim("train-gpu", "ml", [(DRIVER, "node-1", "gpu-0")])])]),
        # one claim referenced by two containers of one pod: a shared GPU
        FakePod("ml", "pair", [FakeContainer("a", claims=[shared]),
                               FakeContainer("b", claims=[shared])]),
        FakePod("ml", "mig", [FakeContainer("m", claims=[
            FakeClaim("mig-claim", "ml", [(DRIVER, "node-1", "gpu-2-mig-1g10gb-19-0")])])]),
        # another driver's device is not a GPU of this node
        FakePod("ml", "other", [FakeContainer("x", claims=[
            FakeClaim("c", "ml", [("example.com/fpga", "node-1", "gpu-0")])])]),
    ])
    yield k
    k.stop()


def attributor(sock: str, dra: bool) -> KubeletAttributor:
    a = build_attributor(KubernetesSettings(enabled=True, kubelet_socket=sock, node_name="node-1",
                                            poll_interval=0.05, dra=dra),
                         kube_api_configuration=KubeConfig(host="http://127.0.0.1:9"))
    assert isinstance(a, KubeletAttributor)
    a.start()
    return a


def test_dra_gpus_carry_pod_labels(dra_kubelet: FakeKubelet) -> None:
    a = attributor(dra_kubelet.socket_path, dra=True)
    try:
        wait_for(lambda: a.attribute(DEVICES, ()).allocations != ())
        allocs = a.attribute(DEVICES, ()).allocations
        held = sorted((x.device_key, x.container.pod, x.container.container, x.resource)
                      for x in allocs)
        assert held == [
            (GPUS[0], "train", "main", "dra/gpu.nvidia.com"),
            (GPUS[1], "pair", "a", "dra/gpu.nvidia.com"),
            (GPUS[1], "pair", "b", "dra/gpu.nvidia.com"),
            (MIG, "mig", "m", "dra/gpu.nvidia.com"),
        ]
    finally:
        a.close()


def test_without_the_flag_dra_claims_are_ignored(dra_kubelet: FakeKubelet) -> None:
    a = attributor(dra_kubelet.socket_path, dra=False)
    try:
        wait_for(lambda: a.attribute(DEVICES, ()).status.ok)
        assert a.attribute(DEVICES, ()).allocations == ()
    finally:
        a.close()


def test_serve_puts_pod_labels_on_dra_gpus(dra_kubelet: FakeKubelet) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import InProcessAgent

    p = InProcessAgent("--simulate", "2", "--simulate-scenario", "none", "-k",
                       "--kubernetes-enable-dra", "--pod-resources-kubelet-socket",
                       dra_kubelet.socket_path, "-c", "200")
    try:
        p.wait_ready()

        def util() -> dict[str, dict[str, str]]:
            _, _, body = p.get("/metrics")
            for fam in text_string_to_metric_families(body.decode()):
                if fam.name == "DCGM_FI_DEV_GPU_UTIL":
                    return {s.labels["gpu"]: dict(s.labels) for s in fam.samples}
            return {}

        wait_for(lambda: "pod" in util().get("0", {}))
        got = util()
        assert (got["0"]["pod"], got["0"]["namespace"], got["0"]["container"]) == (
            "train", "ml", "main")
        # GPU 1 is one claim shared by two containers: no arbitrary winner on the device series
        assert "pod" not in got["1"]
    finally:
        code = p.stop()
    assert code == 0
