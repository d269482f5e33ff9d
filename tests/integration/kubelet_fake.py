"""A real kubelet PodResources v1 gRPC server on a unix socket, for tests.

Serves whatever pods the test sets, can fail `List` with a chosen status, and can be stopped
(socket removed, as when the kubelet restarts) and started again on the same path. `DEVICES` is
the node whose GPUs the attribution tests give to those pods.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from podgpu.attribution import podresources_pb2 as pb
from podgpu.model import Device
from tests.conftest import wait_for as wait_for  # re-exported: the kubelet tests import it here
from tests.integration import podresources_pb2_grpc as pb_grpc

GPUS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]
MIG = "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55"
DEVICES = (
    Device(0, GPUS[0], "00000000:18:00.0", "nvidia0", "NVIDIA H100"),
    Device(1, GPUS[1], "00000000:2A:00.0", "nvidia1", "NVIDIA H100"),
    Device(2, GPUS[2], "00000000:3A:00.0", "nvidia2", "NVIDIA H100", "1g.10gb", 5, MIG),
)
"""The node the attribution tests' kubelet serves: two whole H100s and a MIG 1g.10gb instance
(minor 5) on a third."""


@dataclass
class FakeContainer:
    name: str
    devices: list[tuple[str, list[str]]] = field(default_factory=list)
    """(resource name, device ids)"""
    claims: list[FakeClaim] = field(default_factory=list)
    """DRA allocations (`dynamic_resources`)."""


@dataclass
class FakeClaim:
    """One DRA ResourceClaim as the kubelet lists it: (driver, pool, device) per allocation."""

    name: str
    namespace: str
    devices: list[tuple[str, str, str]]


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer]


def gpu_pod(ns: str, name: str, container: str, resource: str, *ids: str) -> FakePod:
    return FakePod(ns, name, [FakeContainer(container, [(resource, list(ids))])])


class _Servicer(pb_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakeKubelet) -> None:
        self._owner = owner

    def List(self, request: Any, context: Any) -> Any:
        with self._owner.lock:
            self._owner.calls += 1
            fail = self._owner.fail_with
            pods = list(self._owner.pods)
            delay = self._owner.delay
        if delay:  # fault injection: a kubelet whose List hangs
            time.sleep(delay)
        if fail is not None:
            context.abort(fail, "injected failure")
        # The generated protobuf module builds its message classes at import and has no stubs.
        resp = pb.ListPodResourcesResponse()  # type: ignore[attr-defined]
        for p in pods:
            pr = resp.pod_resources.add(name=p.name, namespace=p.namespace)
            pr.cpu_ids.extend([1, 2])  # master-only field: must not confuse any client
            for c in p.containers:
                cr = pr.containers.add(name=c.name)
                cr.cpu_ids.append(3)
                for resource, ids in c.devices:
                    d = cr.devices.add(resource_name=resource, device_ids=ids)
                    d.topology.nodes.add(ID=0)
                for claim in c.claims:
                    dr = cr.dynamic_resources.add(claim_name=claim.name,
                                                  claim_namespace=claim.namespace)
                    for driver, pool, device in claim.devices:
                        res = dr.claim_resources.add(driver_name=driver, pool_name=pool,
                                                     device_name=device)
                        res.cdi_devices.add(name=f"k8s.{driver}/claim={claim.name}-{device}")
        return resp


class FakeKubelet:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.lock = threading.Lock()
        self.pods: list[FakePod] = []
        self.calls = 0
        self.fail_with: grpc.StatusCode | None = None
        self.delay = 0.0
        """Seconds each List sleeps before answering (fault injection)."""
        self._server: Any = None

    def set_pods(self, pods: list[FakePod]) -> None:
        with self.lock:
            self.pods = list(pods)

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        # The generated gRPC module (no stubs) has no annotations.
        pb_grpc.add_PodResourcesListerServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, as a kubelet restart does."""
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)


@contextmanager
def socket_path() -> Iterator[str]:
    """A fresh socket path short enough for AF_UNIX (107 bytes; pytest's tmp_path can exceed)."""
    d = tempfile.mkdtemp(prefix="pgk")
    try:
        yield os.path.join(d, "kubelet.sock")
    finally:
        shutil.rmtree(d, ignore_errors=True)


