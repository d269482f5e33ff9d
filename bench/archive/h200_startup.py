"""Start-up, bare RSS and scrape latency of `podgpu serve` against nvitop-exporter on one GPU, in
one run: each exporter is started `--rounds` times, alternating, one at a time.

Per start: seconds from spawn to the first valid /metrics (HTTP 200 with a GPU series; polled
every 5 ms), then, from 5 s after spawn, 300 back-to-back scrapes on one keep-alive connection
with `Accept-Encoding: gzip` (as Prometheus asks), then RSS (VmRSS) 12 s after spawn, then
SIGTERM. podgpu runs bare (NVML, `-c 1000`, no kubelet, no EMF); `--before-src` adds a second
podgpu tree (e.g. a `git archive` of an older commit) measured the same way.

    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site python3 -m bench.archive.h200_startup $OUT/h200-startup.json \
        --rounds 3 --before-src .run25/before/src          # on the GPU machine
    .venv/bin/python -m bench.archive.h200_startup /tmp/startup.json --simulate --rounds 1   # no GPU
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERIES = {"podgpu": b"DCGM_FI_DEV_GPU_UTIL{", "nvitop": b"gpu_utilization_Percentage"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise ValueError(r.status)
    if r.getheader("Content-Encoding") == "gzip":
        import gzip

        body = gzip.decompress(body)
    return body


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else 0.0


def one_start(kind: str, src: Path | None, simulate: bool) -> dict[str, Any]:
    port = free_port()
    env = dict(os.environ)
    if kind == "nvitop":
        cmd = [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1",
               "--port", str(port), "--interval", "1.0"]
    else:
        cmd = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}", "-c", "1000",
               *(["--simulate", "1"] if simulate else [])]
        assert src is not None
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    want = SERIES["nvitop" if kind == "nvitop" else "podgpu"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = None
    try:
        while time.perf_counter() - t0 < 30 and proc.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                body = scrape(conn)
                conn.close()
                if want in body:
                    first = time.perf_counter() - t0
                    break
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.005)
        if first is None:
            raise RuntimeError(f"{kind}: no valid /metrics: {proc.stderr.read()[-2000:]!r}"
                               if proc.poll() is not None else f"{kind}: no valid /metrics")
        time.sleep(max(0.0, 5.0 - (time.perf_counter() - t0)))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        lat = []
        size = 0
        for _ in range(300):
            t = time.perf_counter()
            size = len(scrape(conn))
            lat.append((time.perf_counter() - t) * 1000)
        conn.close()
        time.sleep(max(0.0, 12.0 - (time.perf_counter() - t0)))
        rss = rss_mib(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"first_metrics_s": round(first, 3), "rss_mib_12s": round(rss, 1),
            "scrape_ms_p50": pct(lat, 0.5), "scrape_ms_p99": pct(lat, 0.99), "body_bytes": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-src", type=Path)
    ap.add_argument("--simulate", action="store_true", help="no GPU: podgpu --simulate, no nvitop")
    a = ap.parse_args()
    kinds: list[tuple[str, Path | None]] = [("podgpu", ROOT / "src")]
    if a.before_src:
        kinds.append(("podgpu-before", a.before_src))
    if not a.simulate:
        kinds.append(("nvitop", None))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in kinds}
    for _ in range(a.rounds):
        for kind, src in kinds:
            runs[kind].append(one_start(kind, src, a.simulate))
            print(kind, runs[kind][-1], flush=True)
    summary = {k: {key: sorted(r[key] for r in v)[len(v) // 2] for key in v[0]}
               for k, v in runs.items()}
    doc = {"command": " ".join(sys.argv), "python": sys.version.split()[0], "median": summary,
           "runs": runs}
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
