"""Lost/hung GPU handling on a real GPU: the NVML backend with every NVML call on per-GPU workers, on the H200.

What only hardware can confirm of lost GPUs, per-GPU workers, MIG parents and clock-event sampling (the fault paths themselves, a hang or
a GPU falling off the bus, are injected in the fake binding by the unit tests; nobody makes a real
GPU fall off the bus on purpose):

- discovery, GPM streams, reads and the P2P row now run on each GPU's worker thread instead of
  the main/collect thread: `podgpu serve` starts, first valid /metrics time, GPM ratios present
  (GPM buffers allocated and sampled on the worker), backend stage time per cycle;
- `/health` 200 "ok" at every probe (a healthy node stays healthy under the new verdict);
- `DCGM_EXP_CLOCK_EVENTS_COUNT` counts one bitmask sample per 30 s: an idle H200 has the
  `gpu_idle` bit set all the time, so after T seconds the count is the number of 30 s slots
  begun, not T (dcgm-exporter's meaning at its default interval);
- `-d f` (the default) on a GPU without MIG: whole-GPU series, no `GPU_I_ID`;
- `DCGM_FI_DEV_XID_ERRORS` and the 11 `DCGM_EXP_GPU_HEALTH_STATUS` series with the GPU's UUID.

    python -m bench.archive.h200_issue17 [OUT.json] [--seconds 70] [--dry-run]

`--dry-run` runs on a simulated H200 (no GPU). Writes $OUT/h200-issue17.json (or OUT.json), prints
a summary, exits 1 when a check fails.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
LIST = """DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Current clock event reasons (bitmask).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_EXP_XID_ERRORS_COUNT, counter, Count of XID errors within the window.
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, Count of clock events within the window.
DCGM_EXP_GPU_HEALTH_STATUS, gauge, GPU health status.
DCGM_EXP_P2P_STATUS, gauge, P2P status.
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
"""


def parse(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    out: dict[str, list[tuple[dict[str, str], str]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and (m := _SAMPLE.match(line)):
            out.setdefault(m[1], []).append((dict(_LABEL.findall(m[2] or "")), m[3]))
    return out


def get(url: str) -> tuple[int, str]:
    for attempt in range(3):  # a response cut short is retried (and would show in the counts)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except http.client.HTTPException:
            if attempt == 2:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(seconds: float, dry: bool) -> dict[str, Any]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "issue17.csv"
        path.write_text(LIST)
        # no -c: podgpu's default 1 s interval, so clock events count per dcgm-exporter's 30 s
        args = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}",
                "-f", str(path), *(["--simulate", "1xH200", "--simulate-scenario", "none"]
                                   if dry else [])]
        log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in finally
        t0 = time.monotonic()
        proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)})
        doc: dict[str, Any] = {"args": args[3:], "dry_run": dry}
        try:
            while proc.poll() is None and time.monotonic() - t0 < 60:
                try:
                    if get(base + "/metrics")[0] == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            if proc.poll() is not None:
                log.seek(0)
                doc["started"], doc["stderr"] = False, log.read()[-4000:]
                return doc
            doc["started"], doc["first_valid_s"] = True, round(time.monotonic() - t0, 3)
            started = time.monotonic()
            health: list[tuple[int, str]] = []
            backend: list[float] = []
            got: dict[str, list[tuple[dict[str, str], str]]] = {}
            while time.monotonic() - started < seconds:
                code, body = get(base + "/health")
                health.append((code, json.loads(body).get("status", "?")))
                got = parse(get(base + "/metrics")[1])
                backend += [float(v) for lb, v in got.get("podgpu_collect_duration_seconds", [])
                            if lb.get("stage") == "backend"]
                time.sleep(1.0)
            elapsed = time.monotonic() - started + doc["first_valid_s"]
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            doc["exit"] = proc.returncode
            log.close()
    clock = {lb.get("clock_event", ""): float(v) for lb, v in
             got.get("DCGM_EXP_CLOCK_EVENTS_COUNT", [])}
    health_series = got.get("DCGM_EXP_GPU_HEALTH_STATUS", [])
    dcgm = [lb for name, fam in got.items() if name.startswith("DCGM_") for lb, _ in fam]
    doc.update(
        seconds=round(elapsed, 1),
        health_codes=sorted({c for c, _ in health}), health_statuses=sorted({s for _, s in health}),
        probes=len(health),
        backend_ms_p50=round(1000 * statistics.median(backend), 3) if backend else None,
        backend_ms_p99=round(1000 * sorted(backend)[int(0.99 * (len(backend) - 1))], 3)
        if backend else None,
        clock_event_counts=clock, clock_slots_max=math.ceil(elapsed / 30.0) + 1,
        reasons_bitmask=[v for _, v in got.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", [])],
        xid=[(lb.get("UUID"), v) for lb, v in got.get("DCGM_FI_DEV_XID_ERRORS", [])],
        health_series=len(health_series),
        health_fail=[lb for lb, v in health_series if v != "0"],
        gr_engine_active=[v for _, v in got.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", [])],
        p2p_unavailable=[lb.get("reason") for lb, _ in got.get("podgpu_field_unavailable", [])
                         if lb.get("field") == "DCGM_EXP_P2P_STATUS"],
        mig_series=sum(1 for lb in dcgm if "GPU_I_ID" in lb),
    )
    checks = {
        "started": bool(doc.get("started")),
        "health_always_200_ok": doc["health_codes"] == [200] and doc["health_statuses"] == ["ok"],
        "clock_counts_per_30s": bool(clock) and max(clock.values()) <= doc["clock_slots_max"],
        "gpm_on_worker": bool(doc["gr_engine_active"]),
        "xid_with_uuid": bool(doc["xid"]) and all(u for u, _ in doc["xid"]),
        "health_11_series_per_gpu": doc["health_series"] > 0 and doc["health_series"] % 11 == 0,
        "flex_whole_gpus_without_mig": doc["mig_series"] == 0,
    }
    doc["checks"] = checks
    return doc


def main(argv: list[str]) -> int:
    dry = "--dry-run" in argv
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 70.0
    paths = [a for a in argv if not a.startswith("--") and a != str(seconds)
             and not re.fullmatch(r"[\d.]+", a)]
    out = Path(paths[0]) if paths else Path(os.environ.get("OUT", ".")) / "h200-issue17.json"
    doc = run(seconds, dry)
    doc["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    for key in ("first_valid_s", "seconds", "probes", "health_codes", "backend_ms_p50",
                "backend_ms_p99", "clock_event_counts", "clock_slots_max", "health_fail",
                "p2p_unavailable", "checks"):
        print(f"{key:20} {doc.get(key)}")
    print(f"wrote {out}")
    return 0 if all(doc.get("checks", {"started": False}).values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
