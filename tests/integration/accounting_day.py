"""A simulated day of podgpu's accounting counters in a real Prometheus.

A node of four GPUs (exclusive, time-sliced 3 ways, MIG 3g+2g+1g+1g, time-sliced 2 ways) runs
the churn schedule of tests/fakes/churn_node.py for 24 hours on an accelerated clock: the real
`Accountant` integrates every 5 s snapshot, and its /metrics text is "scraped" once a minute,
with podgpu restarting at noon (its counters start again at 0). The scrapes become OpenMetrics
with timestamps, `promtool tsdb create-blocks-from openmetrics` turns them into TSDB blocks, and
Debian's Prometheus serves them. `expected()` gives every pod's integrals computed in continuous
time from the schedule alone.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from podgpu.accounting import Accountant
from podgpu.sinks.prometheus.labels import LabelOptions
from podgpu.sinks.prometheus.source import render_sources
from tests.conftest import free_port, wait_for
from tests.fakes.churn_node import ChurnNode, Gpu, Pod, Totals, expected, schedule
from tests.integration.prometheus_peer import ensure_installed, prometheus_ready, stop_prometheus

DAY_START = dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp()
HOURS = 24.0
CYCLE = 5.0
SCRAPE = 60.0
RESTART_AT = 12 * 3600.0
HOSTNAME = "gpu-node-7"
INSTANCE = "10.0.0.17:9400"
GPUS = [Gpu(0, "exclusive"), Gpu(1, "shared", slots=3), Gpu(2, "mig", profiles=(3, 2, 1, 1)),
        Gpu(3, "shared", slots=2)]
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Day:
    url: str
    start: float
    end: float
    pods: list[Pod]
    want: dict[str, Totals]
    proc: subprocess.Popen[str]

    def stop(self) -> None:
        stop_prometheus(self.proc)


def scrape_series() -> tuple[dict[Key, list[tuple[float, float]]], list[Pod]]:
    """Every accounting series podgpu exposes, sampled once a minute for the day."""
    pods = schedule(GPUS, HOURS, seed=1130)
    node = ChurnNode(GPUS, pods, interval=CYCLE, miss=0.02, jitter=0.2, epoch=DAY_START)
    labels = LabelOptions(hostname=HOSTNAME)
    acc = Accountant(labels)
    restarted = False
    next_scrape = DAY_START + SCRAPE
    series: dict[Key, list[tuple[float, float]]] = {}
    target = (("instance", INSTANCE), ("job", "podgpu"))
    for snap in node.snapshots(HOURS):
        if not restarted and snap.taken_at >= DAY_START + RESTART_AT:
            acc, restarted = Accountant(labels), True  # podgpu restarts: counters from 0
        acc.observe(snap)
        if snap.taken_at >= next_scrape:
            for line in render_sources([acc]).splitlines():
                m = _LINE.match(line)
                if m is None:
                    continue
                lab = tuple(sorted(_PAIR.findall(m.group(2)) + list(target)))
                series.setdefault((m.group(1), lab), []).append((next_scrape, float(m.group(3))))
            next_scrape += SCRAPE
    return series, pods


def to_openmetrics(series: dict[Key, list[tuple[float, float]]]) -> str:
    out: list[str] = []
    for (name, labels), points in sorted(series.items()):
        lab = ",".join(f'{k}="{v}"' for k, v in labels)
        out.extend(f"{name}{{{lab}}} {v!r} {t:.3f}\n" for t, v in points)
    out.append("# EOF\n")
    return "".join(out)


def start_day(work: Path) -> Day:
    ensure_installed()
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus package"
    series, pods = scrape_series()
    om = work / "day.om"
    om.write_text(to_openmetrics(series), encoding="utf-8")
    data = work / "data"
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (work / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = subprocess.Popen(
        [ensure_installed(), f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
         "--storage.tsdb.retention.time=100y"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: prometheus_ready(proc, url), 60, "prometheus /-/ready", interval=0.2)
    want, _ = expected(GPUS, pods)
    return Day(url, DAY_START, DAY_START + HOURS * 3600.0, pods, want, proc)
