"""Container Insights events on a real GPU: a 20 s on / 20 s off burn on GPU 0, held by a pod;
the ContainerGPU, PodGPU and NodeGPU utilisation of each 5 s interval must follow the wave.

`podgpu serve` on NVML with `-k` against a kubelet stand-in (real gRPC on a unix socket) that
gives GPU 0 to pod default/gpu-burn-ci-6c9d8f7b5-x2x7q (a Deployment's, so PodName is
`gpu-burn-ci`), the pod watch and the Node GET against an API stand-in (in-cluster config over
TLS, tests/deploy/standins.py), `--emf-container-insights --emf-destination stdout
--emf-interval 5`; `podgpu burn --on 20 --off 20` on GPU 0 after a warm-up. Every event is
checked with tests/ci_contract.py (the add-on's rules restated without podgpu's code).

    PYTHONPATH=/tmp/site:src python3 -m bench.archive.h200_insights $OUT --duration 160   # on the GPU
    .venv/bin/python -m bench.archive.h200_insights /tmp/ci --simulate --duration 100      # simulated

Writes OUT/h200-insights.json (summary and the per-interval utilisation) and
OUT/h200-insights-events.jsonl. Exit 0 when every event passes the contract and, for each of
the three levels, the intervals wholly inside a burn phase read >= 80 % and those wholly inside
an idle phase <= 10 %.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]
PORT = 9433
NODE = "ip-10-0-1-5.ec2.internal"
POD = ("default", "gpu-burn-ci-6c9d8f7b5-x2x7q", "main")
UID = "0b7c5a1e-3f2d-4c6b-9a8e-1d2c3b4a5f61"
WARMUP = 12.0
ON, OFF = 20.0, 20.0
INTERVAL = 5.0


def gpu0_util() -> float | None:
    """GPU 0's DCGM_FI_DEV_GPU_UTIL on /metrics now."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
        conn.close()
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'gpu="0"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def up() -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2)
        conn.request("GET", "/health")
        conn.getresponse().read()
        conn.close()
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--duration", type=float, default=160.0)
    ap.add_argument("--simulate", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from bench.archive.h200_accounting import gpu0_uuid
    from tests import ci_contract
    from tests.deploy.standins import SHIM, KubeApi
    from tests.integration.kube_api_fake import pod
    from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

    uuid = gpu0_uuid(a.simulate)
    api = KubeApi().start()
    obj = pod(UID, POD[0], POD[1], node=NODE, containers={POD[2]: "ab" * 32},
              labels={"app": "gpu-burn-ci", "pod-template-hash": "6c9d8f7b5"})
    obj["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "gpu-burn-ci-6c9d8f7b5",
                                           "controller": True}]
    obj["spec"]["containers"] = [{"name": POD[2],
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    obj["status"]["phase"] = "Running"
    api.fake.put(obj)
    api.fake.nodes[NODE] = {
        "metadata": {"name": NODE, "labels": {"node.kubernetes.io/instance-type":
                                              "p5e.48xlarge"}},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"capacity": {"nvidia.com/gpu": "1"}}}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NODE_NAME": NODE, **api.env()}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    summary: dict[str, Any] = {"gpu0_uuid": uuid, "pod": "/".join(POD), "simulate": a.simulate,
                               "burn": {"warmup_s": WARMUP, "on_s": ON, "off_s": OFF}}
    events_path = out / "h200-insights-events.jsonl"
    scraped: list[tuple[float, float]] = []  # (time, GPU 0's DCGM_FI_DEV_GPU_UTIL on /metrics)
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod(*POD, "nvidia.com/gpu", uuid)])
        cmd = [sys.executable, str(SHIM), str(api.sa_dir), "serve", "-a", f"127.0.0.1:{PORT}",
               "-k", "--pod-resources-kubelet-socket", sock, "--emf-container-insights",
               "--cluster-name", "bench", "--emf-destination", "stdout", "--emf-interval",
               f"{INTERVAL:g}"]
        if a.simulate:
            cmd += ["--simulate", "1xH200", "--simulate-scenario", "none",
                    "--simulate-burn", f"{ON:g},{OFF:g}"]
        summary["serve"] = cmd[3:]
        with open(out / "h200-insights-serve.log", "w") as log, open(events_path, "w") as evf:
            launched = time.time()
            serve = subprocess.Popen(cmd, env=env, stdout=evf, stderr=log, text=True)
            burn = None
            try:
                t0 = time.time()
                while not up():
                    if serve.poll() is not None or time.time() > t0 + 60:
                        raise SystemExit("podgpu did not start; see the serve log")
                    time.sleep(0.2)
                start = time.time()
                # the simulated GPU's burn starts with its backend (about a second after launch)
                burn_at = launched + 1.0 if a.simulate else start + WARMUP
                while time.time() < start + a.duration:
                    util = gpu0_util()
                    if util is not None:
                        scraped.append((time.time(), util))
                    if burn is None and not a.simulate and time.time() >= burn_at:
                        burn = subprocess.Popen(
                            [sys.executable, "-m", "podgpu", "burn", "--on", f"{ON:g}", "--off",
                             f"{OFF:g}", "--duration", f"{a.duration - WARMUP - 5:g}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    time.sleep(0.25)
            finally:
                if burn is not None:
                    text, _ = burn.communicate(timeout=120)
                    summary["burn_tail"] = text.splitlines()[-3:]
                serve.send_signal(signal.SIGTERM)
                serve.wait(30)
        kubelet.stop()
    api.stop()
    events = ci_contract.read_events(events_path.read_text().splitlines())
    errs, stats = ci_contract.check_stream(events)
    summary.update(events=stats["events"], violations=errs[:20], violation_count=len(errs))
    # The wave's start as /metrics saw it (a burn process starts its kernels seconds after it
    # starts: CUDA's initialisation); phases are then whole 20 s halves from there.
    rise = next((t for t, u in scraped if u >= 50), None)
    burn_at = rise - 0.5 if rise is not None else burn_at
    summary["burn_seen_unix"] = round(burn_at, 3)
    summary["intervals"] = follow(events, burn_at)
    for row in summary["intervals"]:
        here = [u for t, u in scraped if row["t"] <= t < row["t"] + INTERVAL]
        row["metrics_mean"] = round(sum(here) / len(here), 1) if here else None
    ok_levels = {}
    for level in ("NodeGPU", "ContainerGPU", "PodGPU"):
        on = [r[level] for r in summary["intervals"] if r["phase"] == "on" and level in r]
        off = [r[level] for r in summary["intervals"] if r["phase"] == "off" and level in r]
        ok_levels[level] = {"on_min": min(on) if on else None, "off_max": max(off) if off
                            else None, "on_intervals": len(on), "off_intervals": len(off)}
    summary["levels"] = ok_levels
    pods = {e.get("PodName") for e in events if e.get("Type") == "PodGPU"}
    summary["pod_names"] = sorted(p for p in pods if p)
    nodes = {(e.get("InstanceId"), e.get("InstanceType")) for e in events
             if e.get("Type") == "NodeGPU"}
    summary["instance"] = sorted(map(list, nodes))
    summary["pass"] = (not errs and all(
        v["on_intervals"] and v["off_intervals"] and v["on_min"] >= 80 and v["off_max"] <= 10
        for v in ok_levels.values()))
    (out / "h200-insights.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "intervals"}, indent=1))
    return 0 if summary["pass"] else 1


def follow(events: list[dict[str, Any]], burn_at: float) -> list[dict[str, Any]]:
    """Per interval: the mean utilisation of GPU 0 at each level, and the burn's phase over
    the whole interval (on, off, or mixed)."""
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.get("GpuDevice") != "nvidia0" or e.get("Type") not in ("NodeGPU", "ContainerGPU",
                                                                     "PodGPU"):
            continue
        prefix = {"NodeGPU": "node", "ContainerGPU": "container", "PodGPU": "pod"}[e["Type"]]
        v = e.get(f"{prefix}_gpu_utilization")
        if v is None:
            continue
        ts = int(e["Timestamp"])
        row = rows.setdefault(ts, {"t": ts / 1000.0})
        row[e["Type"]] = round(ci_mean(v), 1)
    for ts, row in rows.items():
        start, end = ts / 1000.0, ts / 1000.0 + INTERVAL
        # every second of the interval, 1.5 s of margin (NVML averages utilisation over its
        # sample period): an interval touching a phase change is "mixed"
        phases = {((t - burn_at) % (ON + OFF)) < ON if t >= burn_at else False
                  for t in (start - 1.5, start, start + 2.5, end - 1.0, end + 1.0)}
        row["phase"] = "mixed" if len(phases) > 1 else ("on" if phases.pop() else "off")
    return [rows[k] for k in sorted(rows)]


def ci_mean(v: Any) -> float:
    return float(v["Sum"] / v["Count"]) if isinstance(v, dict) else float(v)


if __name__ == "__main__":
    sys.exit(main())
