"""The kubelet's answer is bounded as bytes arrive: a length prefix over the 16 MiB limit ends the
call before the message is read (before: +2.4 GiB within one List deadline), a trickled answer
ends at the List deadline, and a legal answer near the limit is received. Stand-ins: the hostile
HTTP/2 kubelet (kubelet_hostile.py) and the grpcio kubelet (kubelet_fake.py); the checks are the
bytes the stand-in managed to send, the allocations of the call and its reason."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from podgpu.attribution.kubelet import MAX_RECEIVE_BYTES, PodResourcesClient, PodResourcesState
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod
from tests.integration.kubelet_hostile import HostileKubelet

U = "GPU-0a1b2c3d-1111-2222-3333-444455556666"


def poll_and_close(kubelet: HostileKubelet, timeout: float) -> PodResourcesState:
    """One List from a client with a `timeout` s deadline; the client and `kubelet` are closed
    after."""
    client = PodResourcesClient(kubelet.path, timeout_seconds=timeout)
    try:
        return client.poll_once()
    finally:
        client.close()
        kubelet.close()


def test_a_length_prefix_over_the_limit_ends_the_call_before_the_message(tmp_path: Path) -> None:
    kubelet = HostileKubelet(str(tmp_path / "k.sock"), "huge")
    client = PodResourcesClient(kubelet.path, timeout_seconds=10)
    tracemalloc.start()
    try:
        state = client.poll_once()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        client.close()
        kubelet.close()
    assert not state.ok
    assert state.reason == ("List failed: RESOURCE_EXHAUSTED: received message larger than max "
                            f"({2**31} vs. {MAX_RECEIVE_BYTES})")
    assert kubelet.calls == 1
    assert kubelet.sent <= 1 << 20  # at most the first window went out before the close
    assert peak < 4 << 20


@pytest.mark.parametrize(("message", "why"), [
    # protobuf wire format (protobuf.dev/programming-guides/encoding): pod_resources is field 1,
    # length-delimited (wire type 2); as a varint (type 0) it is not the message
    (bytes([(1 << 3) | 0, 1]), "undecodable answer: field 1 has wire type 0"),
    (bytes([(1 << 3) | 2, 100]), "undecodable answer: a field runs past the end of the answer"),
    # a pod whose name (field 1, 5 bytes announced) ends after 1 byte: protobuf's own error
    (bytes([(1 << 3) | 2, 3, (1 << 3) | 2, 5, ord("a")]), "undecodable answer: "),
])
def test_an_answer_that_is_not_a_pod_list_is_named(tmp_path: Path, message: bytes,
                                                   why: str) -> None:
    kubelet = HostileKubelet(str(tmp_path / "k.sock"), "message")
    kubelet.message = message
    state = poll_and_close(kubelet, 10)
    assert not state.ok and state.errors == 1 and state.entries == ()
    assert state.reason.startswith(f"List failed: INTERNAL: {why}"), state.reason
    assert kubelet.calls == 1


def test_a_trickled_answer_ends_at_the_list_deadline(tmp_path: Path) -> None:
    kubelet = HostileKubelet(str(tmp_path / "k.sock"), "trickle")
    state = poll_and_close(kubelet, 1.0)
    assert state.reason == "List failed: DEADLINE_EXCEEDED: Deadline exceeded"
    assert kubelet.sent >= 1  # it was trickling when the deadline ended the call


def test_a_legal_answer_near_the_limit_is_received(tmp_path: Path) -> None:
    """About 15 MiB of device ids: received whole, within the limit."""
    per_pod = 1000
    ids = 290_000
    path = str(tmp_path / "k.sock")
    kubelet = FakeKubelet(path)
    kubelet.set_pods([gpu_pod("ns", f"p{i}", "c", "nvidia.com/gpu",
                              *(f"{U}::{i * per_pod + k}" for k in range(per_pod)))
                      for i in range(ids // per_pod)])
    kubelet.start()
    client = PodResourcesClient(path)
    try:
        state = client.poll_once()
    finally:
        client.close()
        kubelet.stop()
    assert state.ok, state.reason
    assert sum(len(e.device_ids) for e in state.entries) == ids
