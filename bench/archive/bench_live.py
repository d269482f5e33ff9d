"""Does the live page cost the scrape path anything?

One `podgpu serve --simulate N` (default interval, built-in pods). A scraper GETs /metrics over one
keep-alive HTTP/1.1 connection at a fixed pace and records each latency. Phases alternate:

- A: scrapes only;
- B: the same scrapes while the page is open and polling: `--browsers` real headless chromium
  pages on `/` (Debian's chromium via Playwright, charts drawing) plus `--pollers` clients in a
  separate process that each load `/` and its static files once, then GET /api/v1/snapshot every
  `--poll-interval` seconds, as the page does.

Reports p50/p99/max per phase and the median over repeats of each, plus p99(B) - p99(A) beside the
spread of p99 across the A phases (the noise). Also, in process: the time to render the live view
(JSON + page) of one snapshot, next to the exposition render, i.e. what the collect thread pays.

    .venv/bin/python -m bench.archive.bench_live --gpus 8 --repeat 3 --phase-seconds 20 --out bench/results/live-DATE.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def get(conn: http.client.HTTPConnection, path: str) -> bytes:
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}")
    return body


def pollers(port: int, count: int, interval: float, stop: Any) -> None:
    """Child process: `count` page-like clients, each on its own keep-alive connection."""

    def one(i: int) -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=5)
        for path in ("/", "/static/uPlot.iife.min.js", "/static/uPlot.min.css", "/static/live.js",
                     "/static/live.css"):
            get(conn, path)
        next_at = time.monotonic() + interval * i / max(count, 1)  # spread over the interval
        while not stop.is_set():
            time.sleep(max(0.0, next_at - time.monotonic()))
            get(conn, "/api/v1/snapshot")
            next_at += interval

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    stop.wait()


def scrape_phase(port: int, seconds: float, pace: float) -> list[float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=5)
    for _ in range(20):
        get(conn, "/metrics")
    out: list[float] = []
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        time.sleep(max(0.0, next_at - time.monotonic()))
        t0 = time.perf_counter()
        get(conn, "/metrics")
        out.append((time.perf_counter() - t0) * 1000)
        next_at += pace
    conn.close()
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50_ms": round(pct(ms, 0.50), 4), "p99_ms": round(pct(ms, 0.99), 4),
            "max_ms": round(max(ms), 4)}


def render_costs(gpus: int, loops: int) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "src"))
    from podgpu.collect import Collector
    from podgpu.fields.metriclist import load_default
    from podgpu.sim.backend import SimulatedBackend, parse_simulate
    from podgpu.sim.scenario import SimulatedAttributor, default_scenario
    from podgpu.sinks.live import LiveRenderer, ViewOptions, build_view, render_json, render_page
    from podgpu.sinks.prometheus import RenderOptions, render
    from podgpu.sinks.prometheus.labels import LabelOptions

    scenario = default_scenario(gpus)
    backend = SimulatedBackend(*parse_simulate(str(gpus)), scenario=scenario)
    attributor = SimulatedAttributor(scenario)
    metrics = load_default()
    backend.open()
    assert attributor is not None
    attributor.start()
    snap = Collector(backend, metrics.fields, attributor=attributor, want_processes=True).cycle()
    opts = RenderOptions(LabelOptions(hostname="bench"), (("version", "x"),), ())
    live = LiveRenderer(ViewOptions("bench", "simulated", "x", 1.0))
    view_opts = ViewOptions("bench", "simulated", "x", 1.0)

    def per_call(fn: Any) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        return round((time.perf_counter() - t0) / loops * 1000, 4)

    view = build_view(snap, view_opts)
    out = {
        "exposition_render_ms": per_call(lambda: render(snap, metrics, opts)),
        "live_total_ms": per_call(lambda: live(snap)),
        "live_view_ms": per_call(lambda: build_view(snap, view_opts)),
        "live_json_ms": per_call(lambda: render_json(view)),
        "live_page_ms": per_call(lambda: render_page(view)),
        "json_bytes": len(render_json(view)), "page_bytes": len(render_page(view)),
        "exposition_bytes": len(render(snap, metrics, opts)),
    }
    attributor.close()
    backend.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--phase-seconds", type=float, default=20.0)
    ap.add_argument("--pace-ms", type=float, default=10.0, help="one scrape every PACE ms")
    ap.add_argument("--pollers", type=int, default=20)
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--browsers", type=int, default=1)
    ap.add_argument("--render-loops", type=int, default=500)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    costs = render_costs(args.gpus, args.render_loops)
    print("render per snapshot:", json.dumps(costs))
    port = free_port()
    env = {**os.environ, "NODE_NAME": "bench-node", "PYTHONPATH": str(ROOT / "src")}
    server = subprocess.Popen([sys.executable, "-m", "podgpu", "serve", "--simulate", str(args.gpus),
                               "--address", f"{HOST}:{port}"], env=env, stderr=subprocess.DEVNULL)
    phases: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                get(http.client.HTTPConnection(HOST, port, timeout=1), "/metrics")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for rep in range(args.repeat):
            for kind in ("A", "B"):
                load: list[Any] = []
                if kind == "B":
                    load = start_page_load(port, args)
                ms = scrape_phase(port, args.phase_seconds, args.pace_ms / 1000)
                polled = stop_page_load(load)
                row = {"repeat": rep, "phase": kind, **summary(ms), **polled}
                phases.append(row)
                print(json.dumps(row))
    finally:
        server.terminate()
        server.wait(10)

    def med(kind: str, key: str) -> float:
        return round(statistics.median(p[key] for p in phases if p["phase"] == kind), 4)

    a_p99 = [p["p99_ms"] for p in phases if p["phase"] == "A"]
    deltas = [b["p99_ms"] - a["p99_ms"] for a, b in zip(phases[::2], phases[1::2], strict=True)]
    result = {
        "command": " ".join(sys.argv), "machine": platform.machine(), "cpus": os.cpu_count(),
        "gpus": args.gpus, "render": costs, "phases": phases,
        "median": {k: {"p50_ms": med(k, "p50_ms"), "p99_ms": med(k, "p99_ms"), "max_ms": med(k, "max_ms")}
                   for k in ("A", "B")},
        "p99_delta_ms_per_repeat": [round(d, 4) for d in deltas],
        "p99_A_spread_ms": [min(a_p99), max(a_p99)],
    }
    print(json.dumps({k: result[k] for k in ("median", "p99_delta_ms_per_repeat", "p99_A_spread_ms")}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def start_page_load(port: int, args: argparse.Namespace) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    child = ctx.Process(target=pollers, args=(port, args.pollers, args.poll_interval, stop), daemon=True)
    child.start()
    handles: list[Any] = [("pollers", child, stop)]
    if args.browsers:
        proc = subprocess.Popen([sys.executable, __file__, "--browser-child", str(port), str(args.browsers)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready": pages loaded and polling
        handles.append(("browsers", proc, None))
    time.sleep(1.0)
    return handles


def stop_page_load(handles: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, proc, stop in handles:
        if kind == "pollers":
            stop.set()
            proc.join(10)
        else:
            out_text, _ = proc.communicate("stop\n", timeout=30)
            out["browser_cycles_seen"] = out_text.strip()
    return out


def browser_child(port: int, count: int) -> None:
    """Child process: `count` chromium pages on the live page, until a line on stdin."""
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright
    from tests.integration.live_support import launch

    with sync_playwright() as p:
        b = launch(p)
        pages = [b.new_page() for _ in range(count)]
        for pg in pages:
            pg.goto(f"http://{HOST}:{port}/")
        first = [int(pg.get_attribute("body", "data-cycle") or 0) for pg in pages]
        print("ready", flush=True)
        sys.stdin.readline()
        last = [int(pg.evaluate("document.body.dataset.cycle")) for pg in pages]
        print(" ".join(f"{a}->{z}" for a, z in zip(first, last, strict=True)), flush=True)
        b.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--browser-child":
        browser_child(int(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
