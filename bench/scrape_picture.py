"""Scrape log -> real Prometheus TSDB -> query_range -> PNG of per-pod GPU utilization: the
picture a user sees in the dashboard's "GPU utilization per pod" panel.

1. Reads a scrape log (bench/scrape_log.py's format: JSON lines {"t": unix s, "body": text
   exposition} or {"t", "error"}), adds the `instance`/`job` labels and the `up` series a scrape
   would add, and writes every sample with its timestamp as OpenMetrics.
2. `promtool tsdb create-blocks-from openmetrics` turns that into TSDB blocks.
3. Starts Prometheus on those blocks (retention unlimited; `--query.lookback-delta=2s`, because a
   1 s log has no staleness markers and the default 5 minutes would stretch a vanished series,
   e.g. a gpu-burn process between bursts, over the idle phase).
4. query_range of the dashboard's per-pod utilization expression (deploy/gen/promql.py) at 1 s
   steps, plus each GPU's DCGM_FI_DEV_GPU_UTIL for reference, and draws them with matplotlib.

    .venv/bin/python -m bench.scrape_picture LOG.jsonl docs/img/pod-gpu-utilization.png \\
        --title "H200, gpu-burn 20 s on / 20 s off" [--json OUT.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from deploy.gen import promql
from deploy.gen.simnode import parse
from tests.harness import free_port

Key = tuple[str, tuple[tuple[str, str], ...]]


def bad_input(msg: str) -> SystemExit:
    """A bad log: one line naming the file and line, exit 2 (the project's rule for bad input)."""
    print(f"scrape_picture.py: {msg}", file=sys.stderr)
    return SystemExit(2)


def load_log(path: Path, instance: str, job: str) -> tuple[dict[Key, list[tuple[float, float]]], float, float]:
    """{series: [(t, value)]}, first and last scrape time. Bad lines name the file and line."""
    series: dict[Key, list[tuple[float, float]]] = {}
    target = (("instance", instance), ("job", job))
    times: list[float] = []
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            t = float(rec["t"])
        except (ValueError, KeyError, TypeError) as exc:
            raise bad_input(f"{path}:{n}: not a scrape-log line ({exc}); expected "
                            '{"t": <unix seconds>, "body": "<exposition>"}') from None
        times.append(t)
        body = rec.get("body")
        up = 0.0
        if isinstance(body, str):
            try:
                samples = parse(body)
            except ValueError as exc:
                raise bad_input(f"{path}:{n}: {exc}") from None
            for (name, labels), v in samples.items():
                key = (name, tuple(sorted(labels + target)))
                series.setdefault(key, []).append((t, v))
            up = 1.0
        series.setdefault(("up", target), []).append((t, up))
    if not times:
        raise bad_input(f"{path}: no scrapes in the log")
    return series, min(times), max(times)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_openmetrics(series: dict[Key, list[tuple[float, float]]]) -> str:
    """Every sample with its timestamp; families stay together and points in time order, as
    OpenMetrics requires. No TYPE lines: the series keep their names exactly (a counter would
    have to be renamed `_total`), and the TSDB stores samples, not types."""
    out: list[str] = []
    for (name, labels), points in sorted(series.items()):
        lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels)
        out.extend(f"{name}{{{lab}}} {v!r} {t:.3f}\n" for t, v in sorted(points))
    out.append("# EOF\n")
    return "".join(out)


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                "step": "1"})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=60) as r:
        doc = json.loads(r.read())
    if doc["status"] != "success":
        raise SystemExit(f"query_range failed: {doc}")
    return list(doc["data"]["result"])


POD_UTIL = f"avg by (namespace, pod) ({promql.pod_gpu_utilization()})"
DEVICE_UTIL = "max by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL) / 100"


def build_tsdb_and_query(log: Path, work: Path) -> dict[str, Any]:
    series, start, end = load_log(log, "node:9400", "podgpu")
    om = work / "log.om"
    om.write_text(to_openmetrics(series), encoding="utf-8")
    data = work / "data"
    r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"promtool tsdb create-blocks-from failed: {r.stderr[-2000:]}")
    (work / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
         "--query.lookback-delta=2s"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if prom.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"prometheus did not start: {prom.stderr.read() if prom.stderr else ''}") from None
                time.sleep(0.2)
        return {"start": start, "end": end, "pod_expr": POD_UTIL,
                "pods": query_range(url, POD_UTIL, start, end),
                "gpus": query_range(url, DEVICE_UTIL, start, end)}
    finally:
        prom.terminate()
        prom.wait(timeout=30)


def draw(result: dict[str, Any], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = result["start"]
    fig, ax = plt.subplots(figsize=(11, 4.4), dpi=110)
    for s in sorted(result["pods"], key=lambda s: (s["metric"].get("namespace", ""), s["metric"].get("pod", ""))):
        m = s["metric"]
        xs = [float(p[0]) - t0 for p in s["values"]]
        ys = [100 * float(p[1]) for p in s["values"]]
        ax.plot(xs, ys, linewidth=1.6, label=f"{m.get('namespace')}/{m.get('pod')}")
    for s in sorted(result["gpus"], key=lambda s: s["metric"].get("gpu", "")):
        m = s["metric"]
        xs = [float(p[0]) - t0 for p in s["values"]]
        ys = [100 * float(p[1]) for p in s["values"]]
        ax.plot(xs, ys, linewidth=0.8, linestyle=":", color="grey",
                label=f"device: {m.get('Hostname')} GPU {m.get('gpu')}" if m.get("gpu") == "0" else None)
    ax.set_ylim(-3, 105)
    ax.set_xlabel("seconds")
    ax.set_ylabel("GPU utilization per pod (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if "SIMULATED" in title:
        ax.text(0.5, 0.5, "SIMULATED", transform=ax.transAxes, fontsize=40, color="grey",
                alpha=0.12, ha="center", va="center", rotation=15)
    fig.text(0.01, 0.01, "query_range of the dashboard's per-pod expression on a Prometheus TSDB "
             "built from a 1 s podgpu scrape log (bench/scrape_picture.py)", fontsize=7, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--title", default="Per-pod GPU utilization")
    ap.add_argument("--json", type=Path, help="also write the query_range results here")
    args = ap.parse_args(argv)
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        print("scrape_picture.py: needs Debian's prometheus package (scripts/check installs it)",
              file=sys.stderr)
        return 2
    if not args.log.is_file():
        print(f"scrape_picture.py: {args.log}: no such file", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="podgpu-picture-") as tmp:
        result = build_tsdb_and_query(args.log, Path(tmp))
    if not result["pods"]:
        print(f"scrape_picture.py: {args.log}: no per-pod series (was podgpu run with pods: -k or "
              "a simulated scenario?)", file=sys.stderr)
        return 1
    draw(result, args.png, args.title)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"scrape_picture.py: {len(result['pods'])} pod series -> {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
