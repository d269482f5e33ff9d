"""Listener A/B: several podgpu source trees measured alternating in one run.

On a shared machine the absolute numbers drift between minutes, so trees are compared within
one run: each round measures every tree once, in turn (the order rotates each round), with
bench/bench_core.py's podgpu measurement (sequential and `--concurrency`-client scrapes over
keep-alive connections: p50/p99, scrapes/s, server CPU per scrape, RSS after the load) and,
with `--load-duration` > 0, bench/load.py (closed-loop keep-alive scrapers beside slowloris
and half-open connections).

    .venv/bin/python -m bench.archive.listener_ab --tree aiohttp=/tmp/before25/src \\
        --tree h11=/tmp/h11/src --tree fast=src --rounds 3 --out bench/results/ab.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import bench_core


def core(src: str, a: argparse.Namespace, logdir: Path) -> dict[str, Any]:
    bench_core.SRC_OVERRIDE[:] = [str(Path(src).resolve())]
    ns = bench_core.parse_args(["--out", "-", "--gpus", a.gpus, "--scrapes", str(a.scrapes),
                                "--concurrency", str(a.concurrency)])
    ns.idle_seconds = 1.0
    r, _, _ = bench_core.measure("podgpu", ns, logdir)
    return {"seq_p50_ms": r["seq"]["p50_ms"], "seq_p99_ms": r["seq"]["p99_ms"],
            "seq_scrapes_per_s": r["seq"]["scrapes_per_s"],
            "conc_p50_ms": r["conc"]["p50_ms"], "conc_p99_ms": r["conc"]["p99_ms"],
            "conc_scrapes_per_s": r["conc"]["scrapes_per_s"],
            "cpu_ms_per_scrape_seq": r["server_cpu_ms_per_scrape_seq"],
            "cpu_ms_per_scrape_conc": r["server_cpu_ms_per_scrape_conc"],
            "rss_mb": r["rss_mb"], "loadavg1": r["host_loadavg1_before"]}


def load(src: str, a: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.load", "--scrapers", str(a.load_scrapers),
           "--duration", str(a.load_duration), "--slow", str(a.load_slow),
           "--half-open", str(a.load_half_open), "--src", str(Path(src).resolve())]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {k: doc[k] for k in ("scrapes", "failed", "scrapes_per_s", "latency_ms",
                                "rss_mib_before", "rss_mib_max", "fds_max", "log_lines")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=SRC_DIR")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpus", default="8")
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--load-duration", type=float, default=20.0)
    ap.add_argument("--load-scrapers", type=int, default=100)
    ap.add_argument("--load-slow", type=int, default=1000)
    ap.add_argument("--load-half-open", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="podgpu-ab-") as tmp:
        for i in range(a.rounds):
            order = trees[i % len(trees):] + trees[:i % len(trees)]
            for name, src in order:
                print(f"[round {i + 1}/{a.rounds}] {name}", file=sys.stderr, flush=True)
                run: dict[str, Any] = {"round": i + 1, "tree": name, "src": src,
                                       "core": core(src, a, Path(tmp))}
                if a.load_duration > 0:
                    run["load"] = load(src, a)
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
    median: dict[str, dict[str, float]] = {}
    for name, _ in trees:
        mine = [r for r in runs if r["tree"] == name]
        median[name] = {k: statistics.median(r["core"][k] for r in mine) for k in mine[0]["core"]}
        if a.load_duration > 0:
            median[name]["load_scrapes_per_s"] = statistics.median(
                r["load"]["scrapes_per_s"] for r in mine)
            median[name]["load_p99_ms"] = statistics.median(
                r["load"]["latency_ms"]["p99"] for r in mine)
    doc = {"command": sys.argv, "runs": runs, "median": median}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(median, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
