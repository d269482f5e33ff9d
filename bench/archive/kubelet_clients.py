"""What the kubelet PodResources client costs: grpcio (podgpu's client,
attribution/kubelet.py) against grpclib (pure-Python asyncio gRPC over h2) for our one unary
`List` on a unix socket. The kubelet stand-in (a real grpcio server, tests/integration/
kubelet_fake.py) runs in a child process so its own grpc import is not counted; the client runs
here on top of what `podgpu serve` has loaded (h11, pynvml) and calls `List` 50 times, 26 pods
listed. Prints one JSON line: RSS added, peak over the start, threads, time to the first answer.

    PYTHONPATH=src .venv/bin/python -m bench.archive.kubelet_clients grpcio
    PYTHONPATH=src .venv/bin/python -m bench.archive.kubelet_clients grpclib
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import h11  # noqa: E402,F401  - what podgpu serve has loaded before the kubelet client
import pynvml  # noqa: E402,F401

CALLS = 50
SERVER = """
import sys, time
sys.path[:0] = [{root!r}, {src!r}]
from tests.integration.kubelet_fake import FakeContainer, FakeKubelet, FakePod, gpu_pod
k = FakeKubelet({sock!r})
k.set_pods([gpu_pod("default", "train", "main", "nvidia.com/gpu", "GPU-0"),
            *[FakePod("kube-system", f"daemon-{{i}}", [FakeContainer("c")]) for i in range(25)]])
k.start()
print("ready", flush=True)
time.sleep(120)
"""


def status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def with_grpcio(sock: str) -> int:
    from podgpu.attribution.kubelet import PodResourcesClient

    client = PodResourcesClient(sock)
    n = 0
    for _ in range(CALLS):
        state = client.poll_once()
        assert state.ok, state.reason
        n = len(state.entries)
    client._close_channel()  # keep nothing but what a polling client keeps: reopen once
    assert client.poll_once().ok
    return n


def with_grpclib(sock: str) -> int:
    import asyncio

    from grpclib.client import Channel, UnaryUnaryMethod

    from podgpu.attribution import podresources_pb2 as pb
    from podgpu.attribution.kubelet import LIST_METHOD, flatten

    async def run() -> int:
        channel = Channel(path=sock)
        method = UnaryUnaryMethod(channel, LIST_METHOD, pb.ListPodResourcesRequest,
                                  pb.ListPodResourcesResponse)
        n = 0
        for _ in range(CALLS + 1):
            n = len(flatten(await method(pb.ListPodResourcesRequest(), timeout=10)))
        channel.close()
        return n

    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(run())))  # as on the poll thread
    t.start()
    t.join()
    return out[0]


def main() -> int:
    which = sys.argv[1]
    run = {"grpcio": with_grpcio, "grpclib": with_grpclib}[which]
    d = tempfile.mkdtemp(prefix="pgkb")
    sock = os.path.join(d, "kubelet.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(
        root=str(ROOT), src=str(ROOT / "src"), sock=sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        before, hwm_before = status("VmRSS"), status("VmHWM")
        t0 = time.perf_counter()
        entries = run(sock)
        elapsed = time.perf_counter() - t0
        after, hwm = status("VmRSS"), status("VmHWM")
        version = "?"
        import importlib.metadata

        version = importlib.metadata.version(which)
        print(json.dumps({"client": which, "version": version, "entries": entries,
                          "seconds_for_calls": round(elapsed, 3),
                          "rss_before_mib": round(before / 1024, 1),
                          "delta_mib": round((after - before) / 1024, 1),
                          "peak_delta_mib": round((hwm - max(before, hwm_before)) / 1024, 1),
                          "threads": status("Threads")}))
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
