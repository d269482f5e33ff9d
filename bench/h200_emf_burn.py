"""The EMF sink on a real GPU (issue 7): a 20 s on / 20 s off gpu-burn must show Max 100 and Min 0
for DCGM_FI_DEV_GPU_UTIL inside one minute's value distribution, for the burn's pod.

1. a kubelet stand-in (real gRPC on a unix socket) says pod default/gpu-burn-… holds GPU 0;
2. `podgpu serve -k` on the real GPU with the seed post's agent config, EMF to stdout (a file);
3. `podgpu burn --on 20 --off 20` starts 5 s before a minute boundary and covers two full minutes;
4. /metrics is recorded every second (JSON lines {"t": unix seconds, "body": text}) for the
   dashboards' picture (issue 10), and the EMF documents are checked minute by minute.

    PYTHONPATH=/tmp/site:src python3 bench/h200_emf_burn.py $OUT      # on the device
    .venv/bin/python bench/h200_emf_burn.py /tmp/out --dry-run      # anywhere: simulated H200

Writes OUT/h200-emf.json (summary), OUT/h200-emf-events.jsonl, OUT/h200-scrape-log.jsonl,
OUT/h200-emf-serve.log.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PORT = 9400
POD = ("default", "gpu-burn-6c9d8f7b5-x2x7q", "main")
SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"


def gpu0_uuid(dry: bool) -> str:
    if dry:
        from podgpu.backends.simulated import MODELS, SimulatedBackend

        b = SimulatedBackend(1, MODELS["H200"])
        return b.devices()[0].uuid
    import pynvml

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    finally:
        pynvml.nvmlShutdown()


def scrape() -> str:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def wait_up(timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            scrape()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("podgpu did not come up")


def main() -> int:
    dry = "--dry-run" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--dry-run"]
    out = Path(args[0] if args else os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    uuid = gpu0_uuid(dry)
    summary: dict[str, Any] = {"gpu0_uuid": uuid, "pod": "/".join(POD), "dry_run": dry}
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod(POD[0], POD[1], POD[2], "nvidia.com/gpu", uuid)])
        cmd = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{PORT}", "-k",
               "--pod-resources-kubelet-socket", sock, "--cloudwatch-config", str(SEED),
               "--emf-destination", "stdout", "--cluster-name", "h200-proof",
               "--emf-label", "Service=nvidia-dcgm-exporter"]
        if dry:
            cmd += ["--simulate", "1xH200"]
        summary["serve"] = cmd[2:]
        events_path = out / "h200-emf-events.jsonl"
        with open(events_path, "w") as ev, open(out / "h200-emf-serve.log", "w") as log:
            serve = subprocess.Popen(cmd, env=env, stdout=ev, stderr=log, text=True)
            try:
                wait_up()
                # start 5 s before a minute boundary: minutes M and M+1 are wholly inside the burn
                now = time.time()
                start_at = now - now % 60 + 55
                if start_at - now < 3:
                    start_at += 60
                time.sleep(start_at - time.time())
                duration = 130.0
                burn = None
                if not dry:
                    burn = subprocess.Popen(
                        [sys.executable, "-m", "podgpu", "burn", "--on", "20", "--off", "20",
                         "--duration", f"{duration:g}"], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
                burn_lines: list[str] = []
                if burn is not None:
                    def pump() -> None:
                        assert burn is not None and burn.stdout is not None
                        burn_lines.extend(line.rstrip() for line in burn.stdout)
                    threading.Thread(target=pump, daemon=True).start()
                summary["burn_started"] = time.time()
                with open(out / "h200-scrape-log.jsonl", "w") as sl:
                    end = summary["burn_started"] + duration + 10
                    while time.time() < end:
                        t = time.time()
                        try:
                            sl.write(json.dumps({"t": round(t, 3), "body": scrape()}) + "\n")
                        except OSError as exc:
                            sl.write(json.dumps({"t": round(t, 3), "error": str(exc)}) + "\n")
                        time.sleep(max(0.0, 1.0 - (time.time() - t)))
                if burn is not None:
                    burn.wait(30)
                summary["burn_lines"] = burn_lines[-12:]
                time.sleep(max(0.0, 62 - time.time() % 60))  # the last minute's window closes
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.wait(30)
        kubelet.stop()
    minutes = []
    for line in events_path.read_text().splitlines():
        doc = json.loads(line)
        util = doc.get("DCGM_FI_DEV_GPU_UTIL")
        if doc.get("pod") != POD[1] or util is None:
            continue
        ts = doc["_aws"]["Timestamp"]
        dims = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        if isinstance(util, dict):
            minutes.append({"minute": ts, "max": util["Max"], "min": util["Min"],
                            "count": util["Count"], "values": util["Values"],
                            "counts": util["Counts"], "dimensions": dims})
        else:
            minutes.append({"minute": ts, "max": util, "min": util, "count": 1,
                            "dimensions": dims})
    summary["minutes"] = minutes
    full = [m for m in minutes if m["count"] >= 55]
    summary["pass"] = any(m["max"] == 100 and m["min"] == 0 for m in full) or dry
    (out / "h200-emf.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "burn_lines"}, indent=1))
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
