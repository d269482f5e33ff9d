"""The NVML backend proven on a real GPU in one run.

1. starts `podgpu serve -c 1000` on the real GPU and `nvitop-exporter --interval 1` beside it;
2. runs `podgpu burn --on 20 --off 20 --duration 120` and scrapes both exporters every second;
3. checks DCGM_FI_DEV_GPU_UTIL and DCGM_FI_PROF_GR_ENGINE_ACTIVE follow the square wave (busy
   >= 95 % / 0.95, idle <= 5 % / 0.05, from the third sample after each edge on), and that power
   and FB_USED rise while busy;
4. after the burn, a burst of back-to-back scrapes of both for latency percentiles;
5. collection CPU and wall time per cycle: podgpu's NvmlBackend.read against a plain pynvml loop
   making the same NVML calls for the same fields (the floor), in this process, interleaved;
6. every catalog field on this GPU: supported (value) or not (reason).
Writes one JSON document (argv[1], default $OUT/h200-proof.json) and prints a summary.

Run on the device (see bench/RESULTS.md for the exact command). `--dry-run` exercises the script
on a machine without a GPU: serve --simulate, no burn, no nvitop, no floor.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PODGPU_PORT = 9400
NVITOP_PORT = 5050
ON, OFF, DURATION = 20.0, 20.0, 120.0
SKIP_AFTER_EDGE = 2  # samples right after an edge that may still show the old state
TICKS = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            with contextlib.suppress(ValueError):
                out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def first(metrics: dict[str, list[tuple[str, float]]], name: str) -> float | None:
    series = metrics.get(name)
    return series[0][1] if series else None


class Scraper:
    """GET /metrics over one keep-alive connection, timing each full response."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def get(self) -> tuple[float, str]:
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                t0 = time.perf_counter()
                self.conn.request("GET", "/metrics")
                resp = self.conn.getresponse()
                body = resp.read()
                return time.perf_counter() - t0, body.decode()
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        raise OSError(f"scrape of :{self.port} failed")


def wait_up(port: int, timeout: float = 60.0) -> None:
    s = Scraper(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s.get()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing serves :{port}")


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def edges_from_burn(lines: list[str]) -> list[tuple[float, str]]:
    """(unix time, 'busy'|'idle') from the `burn phase=...` lines."""
    edges: list[tuple[float, str]] = []
    for line in lines:
        m = re.match(r"burn phase=\d+ state=(busy|idle) (start|end)=([\d.]+)", line)
        if m and m.group(2) == "start":
            edges.append((float(m.group(3)), m.group(1)))
        elif m and m.group(1) == "busy" and m.group(2) == "end":
            edges.append((float(m.group(3)), "idle"))
    edges.sort()
    merged: list[tuple[float, str]] = []
    for t, state in edges:  # "busy end" and "idle start" are the same edge
        if merged and merged[-1][1] == state:
            continue
        merged.append((t, state))
    return merged


def check_wave(series: list[dict[str, Any]], edges: list[tuple[float, str]], key: str,
               busy_min: float, idle_max: float) -> dict[str, Any]:
    """Every sample from the third after each edge must be in the edge's state."""
    state: list[str | None] = []
    for s in series:
        st = None
        for t, e in edges:
            if s["t"] >= t:
                st = e
        state.append(st)
    judged, bad = 0, []
    for i, s in enumerate(series):
        st = state[i]
        if st is None or s.get(key) is None:
            continue
        since_edge = 0
        j = i
        while j > 0 and state[j - 1] == st:
            j -= 1
            since_edge += 1
        if since_edge < SKIP_AFTER_EDGE:
            continue
        judged += 1
        ok = s[key] >= busy_min if st == "busy" else s[key] <= idle_max
        if not ok:
            bad.append({"t": s["t"], "state": st, key: s[key]})
    busy = [s[key] for s, st in zip(series, state, strict=True)
            if st == "busy" and s.get(key) is not None]
    idle = [s[key] for s, st in zip(series, state, strict=True)
            if st == "idle" and s.get(key) is not None]
    return {"judged": judged, "violations": bad, "pass": judged > 0 and not bad,
            "busy_median": statistics.median(busy) if busy else None,
            "idle_median": statistics.median(idle) if idle else None}


# --- the floor: the same NVML calls as podgpu makes for the default list, written plainly

def floor_reader(pynvml: Any) -> Any:
    n = pynvml
    h = n.nvmlDeviceGetHandleByIndex(0)
    ids = [n.NVML_FI_DEV_MEMORY_TEMP, n.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
           n.NVML_FI_DEV_PCIE_REPLAY_COUNTER, n.NVML_FI_DEV_REMAPPED_UNC,
           n.NVML_FI_DEV_REMAPPED_COR, n.NVML_FI_DEV_REMAPPED_FAILURE,
           (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
           (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF)]
    metrics = [n.NVML_GPM_METRIC_GRAPHICS_UTIL, n.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
               n.NVML_GPM_METRIC_DRAM_BW_UTIL, n.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
               n.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
    samples = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
    n.nvmlGpmSampleGet(h, samples[0])
    mib = 1024 * 1024

    def read() -> dict[str, Any]:
        v: dict[str, Any] = {}
        fvs = n.nvmlDeviceGetFieldValues(h, ids)
        for fv, name in zip(fvs, ("memtemp", "energy", "replay", "unc", "cor", "fail"),
                            strict=False):
            if fv.nvmlReturn == 0:
                v[name] = fv.value.ullVal if fv.valueType == 3 else fv.value.uiVal
        v["sm"] = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        v["mem"] = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)
        v["temp"] = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        v["power"] = n.nvmlDeviceGetPowerUsage(h) / 1000.0
        u = n.nvmlDeviceGetUtilizationRates(h)
        v["util"], v["copy"] = u.gpu, u.memory
        v["enc"] = n.nvmlDeviceGetEncoderUtilization(h)[0]
        v["dec"] = n.nvmlDeviceGetDecoderUtilization(h)[0]
        m = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
        v["free"], v["used"], v["reserved"] = m.free // mib, m.used // mib, m.reserved // mib
        v["license"] = n.nvmlDeviceGetGridLicensableFeatures(h).isGridLicenseSupported
        n.nvmlGpmSampleGet(h, samples[1])
        g = n.c_nvmlGpmMetricsGet_t()
        g.version, g.numMetrics = n.NVML_GPM_METRICS_GET_VERSION, len(metrics)
        g.sample1, g.sample2 = samples
        for i, mid in enumerate(metrics):
            g.metrics[i].metricId = mid
        n.nvmlGpmMetricsGet(g)
        for i in range(len(metrics)):
            v[f"gpm{i}"] = g.metrics[i].value
        samples.reverse()
        return v

    return read


def measure_collection(rounds: int = 6, per_round: int = 10, gap: float = 0.15) -> dict[str, Any]:
    """podgpu NvmlBackend.read vs the floor, ABAB, CPU (thread time) and wall per cycle."""
    import pynvml

    from podgpu.backends.nvml import NvmlBackend
    from podgpu.fields.metriclist import load_default

    fields = load_default().fields
    backend = NvmlBackend()
    backend.open()
    pynvml.nvmlInit()
    floor = floor_reader(pynvml)
    backend.read(fields)  # warm both (GPM first pair, label caches)
    floor()
    res: dict[str, dict[str, list[float]]] = {"podgpu": {"cpu": [], "wall": []},
                                              "floor": {"cpu": [], "wall": []}}
    for _ in range(rounds):
        for name, fn in (("podgpu", lambda: backend.read(fields)), ("floor", floor)):
            for _ in range(per_round):
                time.sleep(gap)  # GPM pairs >= 100 ms apart, like a real interval
                c0, w0 = time.thread_time(), time.perf_counter()
                fn()
                res[name]["cpu"].append(time.thread_time() - c0)
                res[name]["wall"].append(time.perf_counter() - w0)
    backend.close()
    pynvml.nvmlShutdown()
    out: dict[str, Any] = {"fields": len(fields), "cycles_each": rounds * per_round}
    for name, r in res.items():
        out[name] = {"cpu_ms_median": statistics.median(r["cpu"]) * 1e3,
                     "cpu_ms_mean": statistics.mean(r["cpu"]) * 1e3,
                     "wall_ms_median": statistics.median(r["wall"]) * 1e3,
                     "wall_ms_p90": pct(r["wall"], 90) * 1e3}
    out["cpu_ratio_median"] = out["podgpu"]["cpu_ms_median"] / out["floor"]["cpu_ms_median"]
    out["cpu_ratio_mean"] = out["podgpu"]["cpu_ms_mean"] / out["floor"]["cpu_ms_mean"]
    out["wall_ratio_median"] = out["podgpu"]["wall_ms_median"] / out["floor"]["wall_ms_median"]
    return out


def catalog_listing() -> dict[str, Any]:
    from podgpu.backends.nvml import NvmlBackend
    from podgpu.fields.catalog import CATALOG

    backend = NvmlBackend()
    backend.open()
    backend.read(CATALOG)
    time.sleep(1.0)
    reading = backend.read(CATALOG, processes=True)
    backend.close()
    sample = next(s for s in reading.samples if not s.device.is_mig)
    listing = {}
    for f in CATALOG:
        if f.name in sample.values:
            listing[f.name] = {"supported": True, "value": sample.values[f.name],
                               "how": f.source.describe()}
        elif f.group == "EXP":
            series = [(dict(lv.labels), lv.value) for lv in sample.labeled if lv.field == f.name]
            listing[f.name] = {"supported": bool(series), "series": series,
                               "how": f.source.describe()}
        else:
            listing[f.name] = {"supported": False, "reason": sample.missing.get(f.name, "?"),
                               "how": f.source.describe()}
    return {"device": str(sample.device), "fields": listing,
            "supported": sum(1 for v in listing.values() if v["supported"]),
            "total": len(listing)}


def main() -> int:
    dry = "--dry-run" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--dry-run"]
    out_path = Path(args[0] if args else os.path.join(os.environ.get("OUT", "."),
                                                      "h200-proof.json"))
    duration = 45.0 if dry else DURATION
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    log_dir = out_path.parent
    serve_cmd = [sys.executable, "-m", "podgpu", "serve", "--address",
                 f"127.0.0.1:{PODGPU_PORT}", "-c", "1000"]
    if dry:
        serve_cmd += ["--simulate", "1xH200", "--simulate-burn", f"{ON:g},{OFF:g}"]
    result: dict[str, Any] = {"command": " ".join(sys.argv), "serve": serve_cmd[2:],
                              "started": time.time()}
    procs: dict[str, subprocess.Popen[str]] = {}
    serve_log = open(log_dir / "serve.log", "w")  # noqa: SIM115 - closed in finally
    procs["podgpu"] = subprocess.Popen(serve_cmd, env=env, stdout=serve_log,
                                       stderr=subprocess.STDOUT, text=True)
    if not dry:
        nvitop_log = open(log_dir / "nvitop.log", "w")  # noqa: SIM115
        procs["nvitop"] = subprocess.Popen(
            [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1", "--port",
             str(NVITOP_PORT), "--interval", "1.0"],
            env=env, stdout=nvitop_log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_up(PODGPU_PORT)
        if "nvitop" in procs:
            wait_up(NVITOP_PORT)
        time.sleep(2.0)  # both past their first cycles
        ports = {"podgpu": PODGPU_PORT, **({"nvitop": NVITOP_PORT} if "nvitop" in procs else {})}
        scrapers = {k: Scraper(p) for k, p in ports.items()}
        cpu0 = {k: proc_cpu_seconds(p.pid) for k, p in procs.items()}
        t_cpu0 = time.monotonic()
        burn_lines: list[str] = []
        burn = None
        if not dry:
            burn = subprocess.Popen(
                [sys.executable, "-m", "podgpu", "burn", "--on", f"{ON:g}", "--off", f"{OFF:g}",
                 "--duration", f"{duration:g}"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

            def pump() -> None:
                assert burn is not None and burn.stdout is not None
                for line in burn.stdout:
                    burn_lines.append(line.rstrip())
            threading.Thread(target=pump, daemon=True).start()
        else:
            burn_lines.append(f"burn phase=1 state=busy start={result['started']:.3f}")
        series: list[dict[str, Any]] = []
        latency: dict[str, list[float]] = {k: [] for k in ports}
        rss: dict[str, list[float]] = {k: [] for k in procs}
        fields_seen: dict[str, int] = {}
        t_end = time.monotonic() + duration + 15.0  # burn start-up (torch import, CUDA init)
        next_tick = time.monotonic()
        while time.monotonic() < t_end:
            if burn is not None and burn.poll() is not None and time.monotonic() > next_tick:
                t_end = min(t_end, time.monotonic() + 3.0)
            row: dict[str, Any] = {"t": time.time()}
            for k, s in scrapers.items():
                seconds, body = s.get()
                latency[k].append(seconds)
                if k == "podgpu":
                    m = parse_metrics(body)
                    row["gpu_util"] = first(m, "DCGM_FI_DEV_GPU_UTIL")
                    row["gr_engine_active"] = first(m, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                    row["power_w"] = first(m, "DCGM_FI_DEV_POWER_USAGE")
                    row["fb_used_mib"] = first(m, "DCGM_FI_DEV_FB_USED")
                    row["sm_clock"] = first(m, "DCGM_FI_DEV_SM_CLOCK")
                    row["tensor_active"] = first(m, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
                    row["backend_s"] = next((v for lbl, v in m.get(
                        "podgpu_collect_duration_seconds", []) if 'stage="backend"' in lbl), None)
                    fields_seen["podgpu"] = len([n for n in m if n.startswith("DCGM_")])
                else:
                    m = parse_metrics(body)
                    row["nvitop_util"] = first(m, "gpu_utilization_Percentage")
                    fields_seen["nvitop"] = len([n for n in m if n.startswith("gpu_")])
            for k, p in procs.items():
                rss[k].append(proc_rss_mib(p.pid))
            series.append(row)
            next_tick += 1.0
            time.sleep(max(0.0, next_tick - time.monotonic()))
        window = time.monotonic() - t_cpu0
        cpu = {k: (proc_cpu_seconds(p.pid) - cpu0[k]) / window * 100 for k, p in procs.items()}
        # back-to-back scrapes for latency percentiles (both still collecting every second)
        burst: dict[str, list[float]] = {k: [] for k in ports}
        for _ in range(300):
            for k, s in scrapers.items():
                burst[k].append(s.get()[0])
        if burn is not None:
            burn.wait(timeout=30)
        edges = edges_from_burn(burn_lines)
        result.update({
            "burn_output": burn_lines, "edges": edges, "series": series,
            "square_wave": {
                "gpu_util": check_wave(series, edges, "gpu_util", 95, 5),
                "gr_engine_active": check_wave(series, edges, "gr_engine_active", 0.95, 0.05),
                "power_w": check_wave(series, edges, "power_w", 0, 1e9),
                "fb_used_mib": check_wave(series, edges, "fb_used_mib", 0, 1e9),
            },
            "exporters": {k: {
                "cpu_percent_of_one_core": cpu.get(k),
                "rss_mib_max": max(rss[k]) if rss.get(k) else None,
                "rss_mib_last": rss[k][-1] if rss.get(k) else None,
                "scrape_ms_1s": {"n": len(latency[k]), "p50": pct(latency[k], 50) * 1e3,
                                 "p99": pct(latency[k], 99) * 1e3,
                                 "max": max(latency[k]) * 1e3},
                "scrape_ms_burst": {"n": len(burst[k]), "p50": pct(burst[k], 50) * 1e3,
                                    "p99": pct(burst[k], 99) * 1e3},
                "gpu_metric_names": fields_seen.get(k),
            } for k in ports},
            "cpu_window_seconds": window,
        })
        backend_s = [r["backend_s"] for r in series if r.get("backend_s") is not None]
        if backend_s:
            result["serve_backend_stage_ms"] = {"p50": pct(backend_s, 50) * 1e3,
                                                "p99": pct(backend_s, 99) * 1e3}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        serve_log.close()
    if not dry:
        result["collection"] = measure_collection()
        result["catalog"] = catalog_listing()
    sw = result["square_wave"]
    sw_gpu, sw_gr = sw["gpu_util"], sw["gr_engine_active"]
    power_rise = (sw["power_w"]["busy_median"] or 0) - (sw["power_w"]["idle_median"] or 0)
    fb_rise = (sw["fb_used_mib"]["busy_median"] or 0) - (sw["fb_used_mib"]["idle_median"] or 0)
    result["verdict"] = {
        "gpu_util_square_wave": sw_gpu["pass"],
        "gr_engine_active_square_wave": sw_gr["pass"],
        "power_rises_w": power_rise, "power_rises": power_rise > 50,
        "fb_used_rises_mib": fb_rise, "fb_used_rises": fb_rise > 0,
    }
    if "collection" in result:
        result["verdict"]["cpu_ratio_median"] = result["collection"]["cpu_ratio_median"]
        result["verdict"]["cpu_within_1_3x_floor"] = result["collection"]["cpu_ratio_median"] <= 1.3
    ex = result["exporters"]
    if "nvitop" in ex:
        result["verdict"]["scrape_p99_le_nvitop"] = (
            ex["podgpu"]["scrape_ms_1s"]["p99"] <= ex["nvitop"]["scrape_ms_1s"]["p99"])
        result["verdict"]["cpu_le_nvitop"] = (
            ex["podgpu"]["cpu_percent_of_one_core"] <= ex["nvitop"]["cpu_percent_of_one_core"])
        result["verdict"]["fields_ge_nvitop"] = (
            (ex["podgpu"]["gpu_metric_names"] or 0) >= (ex["nvitop"]["gpu_metric_names"] or 0))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({"verdict": result["verdict"], "exporters": result["exporters"],
                      "collection": result.get("collection"),
                      "square_wave": {k: {kk: vv for kk, vv in v.items() if kk != "violations"}
                                      | {"violations": v["violations"][:5]}
                                      for k, v in sw.items()},
                      "serve_backend_stage_ms": result.get("serve_backend_stage_ms"),
                      "catalog_supported": (result.get("catalog") or {}).get("supported")},
                     indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
