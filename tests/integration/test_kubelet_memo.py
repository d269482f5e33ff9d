"""The allocation join is redone only when the kubelet's answer changes, with or without a
pod watch (a per-cycle join cost 1.6 ms for 110 pods; bench/RESULTS.md "Pod attribution")."""

from __future__ import annotations

from podgpu.attribution.attributor import KubeletAttributor
from podgpu.attribution.kubelet import PodResourcesClient
from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path


def test_join_is_reused_while_the_answer_is_unchanged_and_redone_when_it_changes() -> None:
    devices = SimulatedBackend(2, MODELS["H100"]).devices()
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        try:
            kubelet.set_pods([gpu_pod("ns", "a", "c", "nvidia.com/gpu", devices[0].uuid)])
            client = PodResourcesClient(sock, poll_interval_seconds=3600)
            client.poll_once()
            attributor = KubeletAttributor(client)  # no pod watcher
            first = attributor.attribute(devices, ()).allocations
            client.poll_once()  # same answer again
            assert attributor.attribute(devices, ()).allocations is first
            kubelet.set_pods([gpu_pod("ns", "b", "c", "nvidia.com/gpu", devices[1].uuid)])
            client.poll_once()
            changed = attributor.attribute(devices, ()).allocations
            assert [(a.device_key, a.container.pod) for a in changed] == [(devices[1].key, "b")]
            client.close()
        finally:
            kubelet.stop()
