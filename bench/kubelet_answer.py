"""What stays resident in a kubelet client after the largest legal PodResources answer.

    .venv/bin/python -m bench.kubelet_answer --shape replicas
    .venv/bin/python -m bench.kubelet_answer --shape mixed

A real gRPC PodResources server (tests/integration/kubelet_fake.py) in this process serves one
`List` answer just under the kubelet's 16 MiB limit; a child process (`--client SOCKET`) runs
`PodResourcesClient.poll_once()` on it twice (the second answer is the same) and reports its RSS
before, after each poll and at its peak (VmHWM), and what its state keeps. Each shape runs twice:
`before` receives and decodes as the client did until the compact form (`before_client` below:
the answer copied out of the receive buffer, the whole message decoded, then every
`ContainerDevices` message of every resource kept as one entry), `after` as it does now. Shapes:

- `replicas`: every id a time-sliced replica (`<uuid>::<n>`) of `nvidia.com/gpu`, 1,000 per
  pod: the answer is all GPU holders' ids;
- `entries`: 110 pods, each one container listing ~3,140 `nvidia.com/gpu` entries of one id:
  the most entries 16 MiB holds (each with its topology, as the kubelet sends it);
- `mixed`: 110 pods (the kubelet's default pod limit), 8 of them holding one GPU each, the
  rest of the answer other devices' ids (`example.com/nic`), as a device-dense node lists them.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the --client child, whose RSS is measured, never loads it
    from tests.integration.kubelet_fake import FakePod

LIMIT = 16 * 1024 * 1024
UUID = "GPU-0a1b2c3d-1111-2222-3333-{:012x}"


def rss_kib() -> tuple[int, int]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def before_client(sock: str) -> Any:
    """A client decoding as it did before the compact form: the whole answer as one protobuf
    message, then one entry per `ContainerDevices` message of every resource, each with its own
    strings (the shapes list no DRA claims)."""
    import hashlib
    import importlib

    from podgpu.attribution import kubelet
    from podgpu.attribution.grpcunary import unary

    pb: Any = importlib.import_module("podgpu.attribution.podresources_pb2")

    class BeforeClient(kubelet.PodResourcesClient):
        last: tuple[bytes, tuple[Any, ...]] | None = None

        def _call_list(self) -> tuple[kubelet.ContainerDevices, ...]:
            data = bytes(unary(sock, kubelet.LIST_METHOD, b"", timeout=30.0,
                               max_bytes=kubelet.MAX_RECEIVE_BYTES))  # as it was: a copy
            digest = hashlib.blake2b(data, digest_size=16).digest()
            if self.last is not None and self.last[0] == digest:
                return self.last[1]
            response = pb.ListPodResourcesResponse.FromString(data)
            del data
            self.last = None
            entries = tuple(
                kubelet.ContainerDevices(namespace=pod.namespace, pod=pod.name,
                                         container=c.name, resource=dev.resource_name,
                                         device_ids=tuple(dev.device_ids))
                for pod in response.pod_resources for c in pod.containers for dev in c.devices)
            self.last = (digest, entries)
            return entries

    return BeforeClient(sock)


def client(sock: str, decode: str) -> int:
    import importlib

    from podgpu.attribution.kubelet import PodResourcesClient

    importlib.import_module("podgpu.attribution.podresources_pb2")
    for name in ("h2.connection", "h2.config", "h2.events"):
        importlib.import_module(name)
    gc.collect()
    before, _ = rss_kib()
    c = before_client(sock) if decode == "before" else PodResourcesClient(sock, timeout_seconds=30.0)
    out: dict[str, object] = {"rss_before_kib": before}
    for n in (1, 2):
        t0 = time.perf_counter()
        state = c.poll_once()
        seconds = time.perf_counter() - t0
        gc.collect()
        rss, hwm = rss_kib()
        out[f"poll{n}"] = {"ok": state.ok, "reason": state.reason, "seconds": round(seconds, 3),
                           "rss_kib": rss, "growth_mib": round((rss - before) / 1024, 1),
                           "peak_growth_mib": round((hwm - before) / 1024, 1)}
    state = c.state
    out["kept_entries"] = len(state.entries)
    out["kept_ids"] = sum(len(e.device_ids) for e in state.entries)
    print(json.dumps(out))
    return 0


def pods(shape: str) -> list[FakePod]:
    from tests.integration.kubelet_fake import FakeContainer, FakePod, gpu_pod

    if shape == "replicas":
        per_pod, n = 1000, 330
        return [gpu_pod("default", f"pod-{i}", "main", "nvidia.com/gpu",
                        *(f"{UUID.format(0)}::{i * per_pod + k}" for k in range(per_pod)))
                for i in range(n)]
    if shape == "entries":
        per_pod, n = 3140, 110  # 345,400 entries
        return [FakePod("default", f"pod-{i}", [FakeContainer("main", [
            ("nvidia.com/gpu", [f"nvidia{k % 8}::{i * per_pod + k}"]) for k in range(per_pod)])])
            for i in range(n)]
    out: list[FakePod] = []
    for i in range(110):
        devices: list[tuple[str, list[str]]] = [
            ("example.com/nic", [f"nic-{i}-{k:05d}" for k in range(9_000)])]
        if i < 8:
            devices.insert(0, ("nvidia.com/gpu", [UUID.format(i)]))
        out.append(FakePod("default", f"pod-{i}", [FakeContainer("main", devices)]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=("replicas", "entries", "mixed"), default="replicas")
    ap.add_argument("--client", default="", help=argparse.SUPPRESS)
    ap.add_argument("--decode", default="after", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        return client(args.client, args.decode)

    from tests.integration.kubelet_fake import FakeKubelet, _Servicer, socket_path

    with socket_path() as sock:
        kubelet = FakeKubelet(sock)
        kubelet.set_pods(pods(args.shape))
        size = _Servicer(kubelet).List(None, None).ByteSize()
        ids = sum(len(d[1]) for p in kubelet.pods for c in p.containers for d in c.devices)
        assert size <= LIMIT, size
        kubelet.start()
        results = {}
        try:
            for decode in ("before", "after"):
                child = subprocess.run(
                    [sys.executable, "-m", "bench.kubelet_answer", "--client", sock,
                     "--decode", decode], capture_output=True, text=True, check=True, timeout=300)
                results[decode] = json.loads(child.stdout)
        finally:
            kubelet.stop()
    print(json.dumps({"shape": args.shape, "answer_bytes": size, "ids": ids, **results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
