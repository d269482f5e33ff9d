"""A kubelet whose `List` hangs kept a deleted pod's labels and `kubelet: "ok"` for
~11 s at a 1 s interval (a fixed 10 s deadline). Now the deadline follows the interval and an
answer older than `stale_after(interval)` is not used. Against the real gRPC kubelet stand-in; its
`delay` is the injected fault."""

from __future__ import annotations

import pytest

from podgpu.attribution.attributor import KubeletAttributor, build_attributor
from podgpu.attribution.kubelet import PodResourcesClient, list_deadline, stale_after
from podgpu.model import Device
from podgpu.settings import KubernetesSettings
from tests.conftest import FakeClock
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, wait_for

G0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
DEVICES = (Device(0, G0, "00000000:18:00.0", "nvidia0", "NVIDIA H100"),)


@pytest.mark.parametrize("interval", [0.1, 0.5, 1.0, 5.0, 30.0, 3600.0])
def test_the_list_deadline_is_shorter_than_the_staleness_bound(interval: float) -> None:
    assert 1.0 <= list_deadline(interval) <= 10.0
    assert list_deadline(interval) < stale_after(interval)
    assert stale_after(interval) >= interval  # one poll may be a whole interval late


def test_at_one_second_labels_go_within_three_seconds_not_eleven() -> None:
    assert stale_after(1.0) == 3.0 and list_deadline(1.0) == 2.0


def test_an_answer_older_than_the_bound_is_not_used(kubelet: FakeKubelet, sock: str,
                                                    clock: FakeClock) -> None:
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", G0)])
    client = PodResourcesClient(sock, clock=clock)
    att = KubeletAttributor(client, stale_after_seconds=3.0, clock=clock)
    try:
        assert client.poll_once().ok
        first = att.attribute(DEVICES, ())
        assert first.status.ok and [a.container.pod for a in first.allocations] == ["train"]
        clock.advance(2.9)
        assert att.attribute(DEVICES, ()).status.ok
        clock.advance(0.2)  # 3.1 s without a fresh answer: the poll is stuck
        stale = att.attribute(DEVICES, ())
        assert stale.allocations == ()
        assert str(stale.status) == ("unavailable: stale: the last kubelet answer is 3.1 s old "
                                "(limit 3 s)")
        assert client.poll_once().ok  # a fresh answer is used again
        assert att.attribute(DEVICES, ()).status.ok
    finally:
        client.close()


def test_a_hung_list_fails_at_the_deadline_and_drops_the_deleted_pod(kubelet: FakeKubelet,
                                                                     sock: str) -> None:
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", G0)])
    att = build_attributor(KubernetesSettings(enabled=True, kubelet_socket=sock, proc_root="/proc",
                                              poll_interval=1.0),
                           kube_api_configuration=_no_api())
    assert isinstance(att, KubeletAttributor)
    att.start()
    try:
        wait_for(lambda: len(att.attribute(DEVICES, ()).allocations) == 1)
        kubelet.delay = 2.5  # longer than the 2 s deadline at a 1 s interval
        kubelet.set_pods([])  # the pod is deleted while List hangs
        wait_for(lambda: not att.attribute(DEVICES, ()).status.ok, timeout=8.0)
        gone = att.attribute(DEVICES, ())
        assert gone.allocations == ()
        assert "DEADLINE_EXCEEDED" in str(gone.status) or "stale" in str(gone.status), gone.status
        kubelet.delay = 0.0
        wait_for(lambda: att.attribute(DEVICES, ()).status.ok, timeout=15.0)
        assert att.attribute(DEVICES, ()).allocations == ()
    finally:
        att.close()


def _no_api() -> object:
    from podgpu.attribution.kubeapi import KubeConfig

    return KubeConfig(host="http://127.0.0.1:9")
