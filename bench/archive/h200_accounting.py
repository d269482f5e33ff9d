"""Per-pod GPU accounting on a real GPU: a burn pod for a few minutes; the pod's
energy must equal the device counter's increase, its used seconds must follow the burn's phases.

`podgpu serve` on NVML with `-k` against a kubelet stand-in (real gRPC on a unix socket) that gives
GPU 0 to pod default/gpu-burn-acct-7f9c4 exclusively; `podgpu burn --on 20 --off 20` runs on GPU
0 after a 30 s warm-up; /metrics is scraped every second and kept. The burn is a host process, not
in the pod's cgroup, so podgpu sees no process of the pod: used seconds come from the device's
utilisation split by allocation (the sole holder gets all of it), as on a node without hostPID.

    PYTHONPATH=/tmp/site:src python3 -m bench.archive.h200_accounting $OUT --duration 200   # on the GPU
    .venv/bin/python -m bench.archive.h200_accounting /tmp/acct --simulate --duration 100   # simulated

Writes OUT/h200-accounting.json (the summary and every second's counters) and
OUT/h200-accounting-scrape-log.jsonl (the /metrics bodies, for bench/scrape_picture.py).
Exit 0 when energy matches within 1 % and allocated time within 1 %.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PORT = 9431
POD = ("default", "gpu-burn-acct-7f9c4", "main")
WARMUP = 30.0
ON, OFF = 20.0, 20.0
NAMES = ("podgpu_pod_gpu_allocated_seconds_total", "podgpu_pod_gpu_used_seconds_total",
         "podgpu_pod_gpu_energy_joules_total", "podgpu_pod_gpu_memory_byte_seconds_total",
         "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
         "DCGM_FI_DEV_POWER_USAGE")
_LINE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')


def scrape() -> str:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def gpu0(body: str) -> dict[str, float]:
    """GPU 0's accounting counters (the pod's) and device series from one /metrics body."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        m = _LINE.match(line)
        if m is None or m.group(1) not in NAMES or 'gpu="0"' not in m.group(2):
            continue
        if m.group(1).startswith("podgpu_pod_") and f'pod="{POD[1]}"' not in m.group(2):
            continue
        out[m.group(1)] = float(m.group(3))
    return out


def gpu0_uuid(simulate: bool) -> str:
    if simulate:
        from podgpu.sim.backend import MODELS, SimulatedBackend

        return SimulatedBackend(1, MODELS["H200"]).devices()[0].uuid
    import pynvml

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--duration", type=float, default=200.0, help="seconds of scrapes")
    ap.add_argument("--simulate", action="store_true",
                    help="a simulated H200 (its GPU 0 runs the same 20/20 pattern)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

    uuid = gpu0_uuid(a.simulate)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("NODE_NAME", None)  # no pod watch: the kubelet's names are enough here
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"gpu0_uuid": uuid, "pod": "/".join(POD), "simulate": a.simulate,
                               "burn": {"warmup_s": WARMUP, "on_s": ON, "off_s": OFF}}
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod(*POD, "nvidia.com/gpu", uuid)])
        cmd = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{PORT}", "-k",
               "--pod-resources-kubelet-socket", sock]
        if a.simulate:
            cmd += ["--simulate", "1xH200", "--simulate-scenario", "none",
                    "--simulate-burn", f"{ON:g},{OFF:g}"]
        summary["serve"] = cmd[2:]
        with open(out / "h200-accounting-serve.log", "w") as log, \
                open(out / "h200-accounting-scrape-log.jsonl", "w") as scrape_log:
            serve = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
            burn = None
            try:
                t0 = time.time()
                while True:
                    try:
                        scrape()
                        break
                    except OSError:
                        if serve.poll() is not None or time.time() > t0 + 60:
                            raise SystemExit("podgpu did not start; see the serve log") from None
                        time.sleep(0.2)
                start = time.time()
                while time.time() < start + a.duration:
                    t = time.time()
                    if burn is None and not a.simulate and t >= start + WARMUP:
                        burn = subprocess.Popen(
                            [sys.executable, "-m", "podgpu", "burn", "--on", f"{ON:g}", "--off",
                             f"{OFF:g}", "--duration", f"{a.duration - WARMUP - 20:g}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                        summary["burn_started_s"] = round(t - start, 2)
                    body = scrape()
                    scrape_log.write(json.dumps({"t": round(t, 3), "body": body}) + "\n")
                    rows.append({"t": round(t - start, 3), **gpu0(body)})
                    time.sleep(max(0.0, 1.0 - (time.time() - t)))
            finally:
                if burn is not None:
                    text, _ = burn.communicate(timeout=120)
                    summary["burn_tail"] = text.splitlines()[-4:]
                serve.send_signal(signal.SIGTERM)
                serve.wait(30)
        kubelet.stop()
    summarise(summary, rows)
    summary["rows"] = rows
    (out / "h200-accounting.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0 if summary.get("pass") else 1


def summarise(summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    full = [r for r in rows if "podgpu_pod_gpu_energy_joules_total" in r
            and "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in r]
    if len(full) < 10:
        summary["pass"] = False
        summary["why"] = "fewer than 10 scrapes with the pod's counters and the energy counter"
        return
    a, b = full[0], full[-1]
    wall = b["t"] - a["t"]
    device_j = (b["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
                - a["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]) / 1000.0
    pod_j = b["podgpu_pod_gpu_energy_joules_total"] - a["podgpu_pod_gpu_energy_joules_total"]
    alloc = b["podgpu_pod_gpu_allocated_seconds_total"] - a["podgpu_pod_gpu_allocated_seconds_total"]
    used = b["podgpu_pod_gpu_used_seconds_total"] - a["podgpu_pod_gpu_used_seconds_total"]
    summary.update({
        "seconds": round(wall, 2), "scrapes": len(full),
        "allocated_s": round(alloc, 3), "used_s": round(used, 3),
        "pod_energy_j": round(pod_j, 3), "device_energy_j": round(device_j, 3),
        "energy_ratio": round(pod_j / device_j, 5) if device_j else None,
        "allocated_ratio": round(alloc / wall, 5) if wall else None,
    })
    # used seconds per 10 s window against the device's mean utilisation in it: they must move
    # together (rate 1 while the burn is on, 0 while off)
    windows = []
    for i in range(0, len(full) - 10, 10):
        x, y = full[i], full[i + 10]
        dt = y["t"] - x["t"]
        utils = [r["DCGM_FI_DEV_GPU_UTIL"] for r in full[i + 1:i + 11] if "DCGM_FI_DEV_GPU_UTIL" in r]
        windows.append({
            "t": x["t"], "used_per_s": round((y["podgpu_pod_gpu_used_seconds_total"]
                                              - x["podgpu_pod_gpu_used_seconds_total"]) / dt, 3),
            "mean_gpu_util": round(sum(utils) / len(utils) / 100, 3) if utils else None,
            "pod_watts": round((y["podgpu_pod_gpu_energy_joules_total"]
                                - x["podgpu_pod_gpu_energy_joules_total"]) / dt, 1)})
    summary["windows_10s"] = windows
    follow = [abs(w["used_per_s"] - w["mean_gpu_util"]) for w in windows
              if w["mean_gpu_util"] is not None]
    summary["used_vs_util_max_abs_diff"] = round(max(follow), 3) if follow else None
    busy = [w for w in windows if w["used_per_s"] > 0.9]
    idle = [w for w in windows if w["used_per_s"] < 0.1]
    summary["windows_busy_idle"] = [len(busy), len(idle)]
    summary["pass"] = (device_j > 0 and abs(pod_j - device_j) <= 0.01 * device_j
                       and abs(alloc - wall) <= 0.01 * wall + 1.0 and bool(busy) and bool(idle))


if __name__ == "__main__":
    sys.exit(main())
