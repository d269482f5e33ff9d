"""Cost of pod attribution per cycle, with a real gRPC kubelet on a unix socket.

    .venv/bin/python -m bench.bench_attribution --pods 110 --gpus 8 --procs 64 --out bench/results/attribution-<date>.json

Measures: one PodResources `List` round trip (the poller's cost, off the collect path), and
`KubeletAttributor.attribute()` per cycle (on the collect path) in its steady state (inputs
unchanged: memoised join, cached cgroups) and when the kubelet's answer changed every cycle
(the join redone). Processes are resolved through a crafted /proc tree (cgroup v2, containerd).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path, wait_for

from podgpu.attribution.attributor import KubeletAttributor
from podgpu.attribution.cgroups import CgroupReader
from podgpu.attribution.kubelet import PodResourcesClient
from podgpu.model import GpuProcess
from podgpu.sim.backend import MODELS, SimulatedBackend


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    devices = SimulatedBackend(args.gpus, MODELS["H100"]).devices()
    # every pod holds one time-sliced replica of a GPU: the densest realistic node (110 pods)
    pods = [gpu_pod("ns", f"pod-{i}", "main", "nvidia.com/gpu",
                    f"{devices[i % len(devices)].uuid}::{i // len(devices)}")
            for i in range(args.pods)]
    proc_root = Path(tempfile.mkdtemp(prefix="podgpu-proc-"))
    procs = []
    for k in range(args.procs):
        pid = 10_000 + k
        uid = f"{k:08x}-0000-4000-8000-000000000000"
        (proc_root / str(pid)).mkdir()
        (proc_root / str(pid) / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{k:064x}.scope\n")
        procs.append(GpuProcess(devices[k % len(devices)].key, pid, 2**30, 10.0))
    processes = tuple(procs)

    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods(pods)
        client = PodResourcesClient(sock, poll_interval_seconds=3600)
        list_ms = []
        for _ in range(200):
            t0 = time.perf_counter()
            state = client.poll_once()
            list_ms.append((time.perf_counter() - t0) * 1e3)
        assert state.ok and len(state.entries) == args.pods, state
        attributor = KubeletAttributor(client, cgroups=CgroupReader(str(proc_root)))
        a = attributor.attribute(devices, processes)
        assert len(a.allocations) == args.pods, len(a.allocations)
        assert sum(1 for p in a.processes if p.container is not None) == args.procs

        steady = []
        for _ in range(args.cycles):
            t0 = time.perf_counter()
            attributor.attribute(devices, processes)
            steady.append((time.perf_counter() - t0) * 1e3)

        changed = []
        for i in range(200):
            kubelet.set_pods(pods[: args.pods - (i % 2)])  # the answer differs every cycle
            client.poll_once()
            t0 = time.perf_counter()
            attributor.attribute(devices, processes)
            changed.append((time.perf_counter() - t0) * 1e3)
        client.close()
        kubelet.stop()
        wait_for(lambda: not os.path.exists(sock))

    result = {
        "pods": args.pods, "gpus": args.gpus, "procs": args.procs,
        "list_ms": {"p50": statistics.median(list_ms), "p99": pct(list_ms, 0.99)},
        "attribute_steady_ms": {"p50": statistics.median(steady), "p99": pct(steady, 0.99)},
        "attribute_changed_ms": {"p50": statistics.median(changed), "p99": pct(changed, 0.99)},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
