#!/usr/bin/env python3
"""A fleet of real `podgpu serve --simulate` processes scraped by one real Prometheus at 1 s with
podgpu's rules loaded.

Each node is its own process on loopback with its own NODE_NAME (so its own Hostname label); the
Prometheus is Debian's, with the shipped deploy/prometheus/podgpu.rules.yml and a self-scrape
job for its own ingestion numbers. After `--duration` seconds it reports, from Prometheus' own
series and from /proc:

  up ratio (scrapes that failed), scrape duration p50/p99 per target, samples ingested per
  second, head series, Prometheus CPU and RSS, podgpu CPU and RSS per node, the machine's load,

and writes them as JSON. The extrapolation to bigger fleets is in bench/RESULTS.md.

  .venv/bin/python -m bench.fleet --nodes 50 --gpus 8 --duration 300 --out bench/results/fleet.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness import Serve, free_port

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "podgpu.rules.yml"
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (not its children), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs since boot, from /proc/stat."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} not ready in {timeout} s")


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=30) as r:
            doc = json.loads(r.read())
        if doc["status"] != "success":
            raise SystemExit(f"query failed: {expr}: {doc}")
        return list(doc["data"]["result"])

    def scalar(self, expr: str) -> float:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else float("nan")

    def per_target(self, expr: str) -> list[float]:
        return sorted(float(r["value"][1]) for r in self.query(expr))


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--duration", type=float, default=300.0, help="measured seconds after warm-up")
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--rules-interval", help="evaluate the rule groups this often instead of the "
                    "shipped interval (the CI smoke run is shorter than one shipped interval)")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    args = ap.parse_args(argv)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("bench/fleet.py: prometheus not found; run scripts/check (it installs Debian's)",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="podgpu-fleet-"))
    nodes: list[Serve] = []
    prom_proc: subprocess.Popen[bytes] | None = None
    try:
        def start(i: int) -> Serve:
            return Serve(["--simulate", str(args.gpus)], node_name=f"fleet-node-{i:03d}",
                         src=ROOT / "src")

        nodes.extend(start(i) for i in range(args.nodes))
        for i in range(args.nodes):
            for attempt in range(5):
                try:
                    nodes[i].wait_ready(120.0)
                    break
                except RuntimeError as exc:
                    # another process on this shared machine took the free port first: retry
                    if "already in use" not in str(exc) or attempt == 4:
                        raise
                    nodes[i] = start(i)
        pport = free_port()
        rules = RULES
        if args.rules_interval:
            rules = work / "rules.yml"
            rules.write_text(RULES.read_text().replace("interval: 30s",
                                                       f"interval: {args.rules_interval}"))
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "30s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "podgpu", "static_configs": [
                    {"targets": [f"127.0.0.1:{node.port}" for node in nodes]}]},
                {"job_name": "prometheus",
                 "static_configs": [{"targets": [f"127.0.0.1:{pport}"]}]},
            ],
        }
        (work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        prom_proc = subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{pport}", f"--storage.tsdb.path={work / 'data'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{pport}/-/ready", prom_proc)
        prom = Prom(f"http://127.0.0.1:{pport}")
        time.sleep(args.warmup)

        load0 = os.getloadavg()
        busy0 = machine_busy()
        cpu0 = [proc_cpu_seconds(node.pid) for node in nodes]
        pcpu0 = proc_cpu_seconds(prom_proc.pid)
        t0 = time.monotonic()
        rss_peak = 0
        while time.monotonic() - t0 < args.duration:
            time.sleep(min(10.0, args.duration - (time.monotonic() - t0)))
            rss_peak = max(rss_peak, proc_rss_bytes(prom_proc.pid))
        elapsed = time.monotonic() - t0
        cpu1 = [proc_cpu_seconds(node.pid) for node in nodes]
        pcpu1 = proc_cpu_seconds(prom_proc.pid)
        busy1 = machine_busy()
        load1 = os.getloadavg()
        w = f"{int(elapsed)}s"
        job = 'job="podgpu"'
        node_cpu = [(b - a) / elapsed for a, b in zip(cpu0, cpu1, strict=True)]
        node_rss = [proc_rss_bytes(node.pid) for node in nodes]
        scrapes = prom.scalar(f"sum(count_over_time(up{{{job}}}[{w}]))")
        failed = prom.scalar(f"sum(count_over_time(up{{{job}}}[{w}])) - sum(sum_over_time(up{{{job}}}[{w}]))")
        p50 = prom.per_target(f"quantile_over_time(0.5, scrape_duration_seconds{{{job}}}[{w}])")
        p99 = prom.per_target(f"quantile_over_time(0.99, scrape_duration_seconds{{{job}}}[{w}])")
        result = {
            "command": "bench/fleet.py " + " ".join(argv),
            "nodes": args.nodes, "gpus_per_node": args.gpus, "duration_s": round(elapsed, 1),
            "scrape_interval_s": 1,
            "up": {
                "targets_up_now": prom.scalar(f"sum(up{{{job}}})"),
                "min_up_ratio_per_target": min(prom.per_target(f"avg_over_time(up{{{job}}}[{w}])")),
                "scrapes": scrapes, "failed_scrapes": failed,
            },
            "scrape_duration_ms": {
                "p50_per_target": {"min": 1e3 * p50[0], "median": 1e3 * quantile(p50, 0.5),
                                   "max": 1e3 * p50[-1]},
                "p99_per_target": {"min": 1e3 * p99[0], "median": 1e3 * quantile(p99, 0.5),
                                   "max": 1e3 * p99[-1]},
            },
            "samples_per_scrape_per_target": prom.scalar(f"avg(avg_over_time(scrape_samples_scraped{{{job}}}[{w}]))"),
            "samples_ingested_per_s": prom.scalar(f"rate(prometheus_tsdb_head_samples_appended_total[{w}])"),
            "head_series": prom.scalar("prometheus_tsdb_head_series"),
            "rule_group_eval_ms": 1e3 * prom.scalar(
                'max(prometheus_rule_group_last_duration_seconds{rule_group=~".*podgpu.*"})'),
            "prometheus": {
                "cpu_cores": (pcpu1 - pcpu0) / elapsed,
                "rss_bytes_end": proc_rss_bytes(prom_proc.pid), "rss_bytes_peak": rss_peak,
                "go_heap_inuse_bytes": prom.scalar('go_memstats_heap_inuse_bytes{job="prometheus"}'),
            },
            "podgpu_per_node": {
                "cpu_cores_median": quantile(node_cpu, 0.5), "cpu_cores_max": max(node_cpu),
                "cpu_cores_total": sum(node_cpu),
                "rss_bytes_median": quantile([float(x) for x in node_rss], 0.5),
                "collect_total_ms_median": 1e3 * prom.scalar(
                    f'quantile(0.5, avg_over_time(podgpu_collect_duration_seconds{{stage="total", {job}}}[{w}]))'),
            },
            "machine": {
                "cpus": os.cpu_count(),
                "loadavg_start": load0, "loadavg_end": load1,
                "busy_pct_during": 100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
            },
        }
        text = json.dumps(result, indent=2)
        print(text)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
        return 0
    finally:
        if prom_proc is not None:
            prom_proc.terminate()
        for node in nodes:  # all at once, then each waited for (SIGKILL after 10 s)
            if node.running():
                node.proc.terminate()
        for node in nodes:
            node.stop(timeout=10.0)
        if prom_proc is not None:
            try:
                prom_proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prom_proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
