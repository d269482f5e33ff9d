"""Start-up, bare RSS and scrape latency of `podgpu serve` beside nvitop-exporter, in one run.

    # on a GPU machine (wheels in /tmp/site, bytecode compiled as in the image):
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site python3 -m bench.startup \\
        --out $OUT/startup.json --rounds 3 [--src DIR] [--before-src /tmp/before/src]
    # without a GPU (podgpu --simulate 1, no nvitop-exporter):
    .venv/bin/python -m bench.startup --out /tmp/startup.json --simulate --rounds 3
    # without a GPU, podgpu's real NVML backend over a fake NVML whose init takes 0.04 s
    # (bench/slow_nvml/pynvml.py; GPM supported, so the first cycle waits for GPM's 0.1 s):
    .venv/bin/python -m bench.startup --out /tmp/startup.json --fake-nvml --rounds 3

Each exporter is started `--rounds` times, alternating (each round begins with the next one), one at a
time. Per start: seconds from
spawn to the first valid /metrics (HTTP 200 with a GPU series; polled every 5 ms on a fresh
connection), then from 5 s after spawn `--scrapes` (300) back-to-back scrapes on one keep-alive connection
with `Accept-Encoding: gzip` (as Prometheus asks), then RSS (VmRSS) 12 s after spawn (or when the
scrapes end, if later: nvitop-exporter takes ~3 ms a scrape), then
SIGTERM; with `--first-only` a start is stopped at its first valid /metrics (no scrapes, no
RSS), so many rounds cost seconds. `--modules` runs the exporters under `-X importtime` and adds the number of modules
each had imported by then (that costs start-up time: leave it off for the timings).
`--breakdown` adds one podgpu start under `-X importtime` with JSON logs, split at its own log
lines: seconds to the device line (imports and NVML's init done), to "listening" (the first
collection and the listener's imports done), to the first valid /metrics, and the import time
within each part. podgpu runs bare
(NVML, `-c 1000`, no kubelet, no EMF, no web config); `--before-src` adds another podgpu tree
(e.g. a `git archive` of an older commit) measured the same way; nvitop-exporter runs at
`--interval 1.0`. The median of the rounds is reported per exporter.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[1]
FAKE_NVML = False
"""--fake-nvml: podgpu's NVML backend over bench/slow_nvml/pynvml.py."""
PODGPU_ARGS: list[str] = []
"""--podgpu-args, split."""
SCRAPES = 300
"""--scrapes: per start, for the latency figures."""
FIRST_ONLY = False
"""--first-only: each start ends at its first valid /metrics (no scrapes, no RSS)."""
SERIES = {"podgpu": b"DCGM_FI_DEV_GPU_UTIL{", "nvitop": b"gpu_utilization_Percentage"}


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
    return gzip.decompress(body) if r.getheader("Content-Encoding") == "gzip" else body


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else 0.0


def command(kind: str, port: int, simulate: bool, modules: bool) -> list[str]:
    python = [sys.executable, *(["-X", "importtime"] if modules else [])]
    if kind == "nvitop":
        return [*python, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1", "--port",
                str(port), "--interval", "1.0"]
    return [*python, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}", "-c", "1000",
            *(["--simulate", "1", "--simulate-scenario", "none"] if simulate else []),
            *PODGPU_ARGS]


def first_metrics(port: int, want: bytes, proc: subprocess.Popen[Any], t0: float) -> float:
    while time.perf_counter() - t0 < 30 and proc.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            body = scrape(conn)
            conn.close()
            if want in body:
                return time.perf_counter() - t0
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.005)
    raise RuntimeError(f"no valid /metrics within 30 s (exit {proc.poll()})")


def environment(src: Path | None) -> dict[str, str]:
    """PYTHONPATH: the podgpu tree first (after the fake NVML with --fake-nvml)."""
    env = dict(os.environ)
    if src is not None:
        fake = [str(ROOT / "bench" / "slow_nvml"), str(ROOT)] if FAKE_NVML else []
        env["PYTHONPATH"] = os.pathsep.join([*fake, str(src),
                                             *filter(None, [env.get("PYTHONPATH")])])
    return env


def one_start(kind: str, src: Path | None, simulate: bool, modules: bool) -> dict[str, Any]:
    port = free_port()
    env = environment(src)
    want = SERIES["nvitop" if kind == "nvitop" else "podgpu"]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command(kind, port, simulate, modules), env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            try:
                first = first_metrics(port, want, proc, t0)
            except RuntimeError as exc:
                err.seek(0)
                raise RuntimeError(f"{kind}: {exc}: {err.read()[-3000:]!r}") from None
            if FIRST_ONLY:
                return {"first_metrics_s": round(first, 4)}
            time.sleep(max(0.0, 5.0 - (time.perf_counter() - t0)))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            lat = []
            size = 0
            for _ in range(SCRAPES):
                t = time.perf_counter()
                size = len(scrape(conn))
                lat.append((time.perf_counter() - t) * 1000)
            conn.close()
            time.sleep(max(0.0, 12.0 - (time.perf_counter() - t0)))
            rss = rss_mib(proc.pid)
            err.seek(0)
            imported = sum(line.startswith(b"import time:") for line in err.read().splitlines())
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    out = {"first_metrics_s": round(first, 3), "rss_mib_12s": round(rss, 1),
           "scrape_ms_p50": pct(lat, 0.5), "scrape_ms_p99": pct(lat, 0.99), "body_bytes": size}
    if modules:
        out["modules_12s"] = imported - 1  # less the header line
    return out


def breakdown(src: Path, simulate: bool) -> dict[str, Any]:
    """One podgpu start split at its log lines (see the module docstring)."""
    import threading

    port = free_port()
    env = environment(src)
    cmd = [*command("podgpu", port, simulate, True), "--log-format", "json"]
    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    stream = proc.stderr

    def read() -> None:
        for line in stream:
            lines.append((time.perf_counter() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        first = first_metrics(port, SERIES["podgpu"], proc, t0)
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(5)
    marks = {"devices": ('"NVML: ', '"SIMULATED GPU node'), "listening": ('"listening on',)}
    at = {name: next((t for t, line in lines if any(m in line for m in needles)), None)
          for name, needles in marks.items()}
    spans = {"imports_and_nvml_init": (0.0, at["devices"]),
             "first_collection_and_listener": (at["devices"], at["listening"]),
             "to_first_metrics": (at["listening"], first)}
    out: dict[str, Any] = {"first_metrics_s": round(first, 3)}
    for name, (start, end) in spans.items():
        if start is None or end is None:
            continue
        micros = sum(int(line.split("|")[0].split(":")[1]) for t, line in lines
                     if start <= t < end and line.startswith("import time:")
                     and line.split("|")[0].split(":")[1].strip().isdigit())
        out[name] = {"seconds": round(end - start, 3), "import_self_s": round(micros / 1e6, 3)}
    out["modules"] = sum(line.startswith("import time:") for _, line in lines) - 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the podgpu tree to measure")
    ap.add_argument("--before-src", type=Path, help="another podgpu tree, measured the same way")
    ap.add_argument("--simulate", action="store_true", help="no GPU: podgpu --simulate, no nvitop")
    ap.add_argument("--modules", action="store_true", help="count imported modules (-X importtime)")
    ap.add_argument("--breakdown", action="store_true", help="one more podgpu start, split")
    ap.add_argument("--fake-nvml", action="store_true",
                    help="no GPU: podgpu over bench/slow_nvml's fake NVML, no nvitop")
    ap.add_argument("--scrapes", type=int, default=300,
                    help="scrapes per start for p50/p99 (more: a steadier latency figure)")
    ap.add_argument("--podgpu-args", default="",
                    help="more arguments for every podgpu start (one string, split as a shell "
                         "would), e.g. \"-f list.csv\"")
    ap.add_argument("--podgpu-series", default=SERIES["podgpu"].decode(),
                    help="what podgpu's first valid /metrics must hold (default %(default)s; "
                         "e.g. DCGM_FI_PROF_GR_ENGINE_ACTIVE{ for the first answer with GPM's "
                         "values)")
    ap.add_argument("--first-only", action="store_true",
                    help="only the first valid /metrics: each start stopped there (seconds, not "
                         "12 s, a start: many rounds for a steadier start-up figure)")
    a = ap.parse_args()
    global FAKE_NVML, PODGPU_ARGS, SCRAPES, FIRST_ONLY
    FAKE_NVML = a.fake_nvml
    FIRST_ONLY = a.first_only
    SERIES["podgpu"] = a.podgpu_series.encode()
    PODGPU_ARGS = shlex.split(a.podgpu_args)
    SCRAPES = a.scrapes
    kinds: list[tuple[str, Path | None]] = [("podgpu", a.src.resolve())]
    if a.before_src:
        kinds.append(("podgpu-before", a.before_src.resolve()))
    if not a.simulate and not a.fake_nvml:
        kinds.append(("nvitop", None))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in kinds}
    for r in range(a.rounds):
        for kind, src in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:  # each goes first in turn
            runs[kind].append(one_start(kind, src, a.simulate, a.modules))
            print(kind, runs[kind][-1], flush=True)
    median = {k: {key: sorted(r[key] for r in v)[len(v) // 2] for key in v[0]}
              for k, v in runs.items()}
    doc: dict[str, Any] = {"command": " ".join(sys.argv), "python": sys.version.split()[0],
                           "median": median, "runs": runs}
    if a.breakdown:
        doc["breakdown"] = {kind: breakdown(src, a.simulate) for kind, src in kinds
                            if src is not None}
        print(json.dumps(doc["breakdown"], indent=1))
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(median, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
