"""--kubernetes-enable-dra against the real gRPC kubelet stand-in serving `dynamic_resources`:
NVIDIA DRA GPUs carry pod labels like device-plugin GPUs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podgpu.attribution.attributor import KubeletAttributor, build_attributor
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.model import Device
from podgpu.settings import KubernetesSettings
from tests.integration.kubelet_fake import FakeClaim, FakeContainer, FakeKubelet, FakePod, wait_for

G = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]
MIG = "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55"
DEVICES = (
    Device(0, G[0], "00000000:18:00.0", "nvidia0", "NVIDIA H100"),
    Device(1, G[1], "00000000:2A:00.0", "nvidia1", "NVIDIA H100"),
    Device(2, G[2], "00000000:3A:00.0", "nvidia2", "NVIDIA H100", "1g.10gb", 5, MIG),
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
            (G[0], "train", "main", "dra/gpu.nvidia.com"),
            (G[1], "pair", "a", "dra/gpu.nvidia.com"),
            (G[1], "pair", "b", "dra/gpu.nvidia.com"),
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
