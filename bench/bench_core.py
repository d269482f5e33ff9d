"""Exporter-core benchmark: podgpu against a build-per-scrape baseline.

On one simulated N-GPU node, in the same run, for `podgpu serve --simulate N` and for
`bench/baseline_prometheus_client.py` (prometheus_client, builds every series on each scrape):

- time from process start to the first valid /metrics (200, parses with prometheus_client's
  parser, DCGM_FI_DEV_GPU_UTIL for every GPU);
- scrape latency p50/p99 and scrapes/s, sequentially over one keep-alive connection and with
  `--concurrency` client threads (one keep-alive connection each), no gzip;
- server CPU per scrape and VmRSS/VmHWM after that load;
- podgpu only: CPU per collection cycle over an idle window (no scrapes), from /proc/<pid>/stat
  (what `ps` sees, 10 ms ticks) and from per-thread schedstat (nanoseconds), divided by the
  cycles podgpu itself counts (`podgpu_collect_cycles_total`);
- "choosing the default interval": podgpu's idle CPU % at several `-c` values.

Each repeat measures both servers one after the other (the order alternates between repeats so
drift on a shared machine does not favour one side); medians over repeats are reported, and
ratios are computed within each repeat before taking their median.

    .venv/bin/python -m bench.bench_core --gpus 8 --repeat 3 --out bench/results/core-DATE.json

The baseline speaks HTTP/1.0 (wsgiref), so it closes the connection after every response: its
"keep-alive" client reconnects on each scrape, exactly as Prometheus would against it. The JSON
records connections opened per mode so this is visible.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.harness import free_port

HOST = "127.0.0.1"
BENCH_DIR = Path(__file__).resolve().parent
BASELINE = BENCH_DIR / "baseline_prometheus_client.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
NODE_NAME = "bench-node"
TARGETS = {  # "Done when"
    "seq_p99_ms_max": 2.0,
    "scrapes_per_s_ratio_min": 5.0,
    "rss_mb_max": 60.0,  # MB = 10^6 bytes, the stricter reading
    "first_valid_s_max": 1.5,
}


# --------------------------------------------------------------------------- HTTP client
class HttpClient:
    """GET over a raw socket, HTTP/1.1 keep-alive; reconnects when the server closes.

    A raw socket rather than http.client: the client's own parsing cost stays out of the latency
    as far as Python allows (http.client parses headers with the email package).
    """

    def __init__(self, port: int, path: str = "/metrics") -> None:
        self.port = port
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
                        "User-Agent: podgpu-bench\r\nAccept: */*\r\n\r\n").encode()
        self.sock: socket.socket | None = None
        self.connects = 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self) -> tuple[int, bytes]:
        if self.sock is None:
            self.sock = socket.create_connection((HOST, self.port), timeout=10)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connects += 1
        sock = self.sock
        sock.sendall(self.request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                self.close()
                raise ConnectionError("server closed before the response headers")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        version, status = lines[0].split(b" ", 2)[:2]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip().lower()
        if b"transfer-encoding" in headers:
            raise ConnectionError("chunked responses are not expected from either server")
        body = bytearray(rest)
        length = headers.get(b"content-length")
        if length is None:  # read to EOF
            while chunk := sock.recv(262144):
                body += chunk
            self.close()
            return int(status), bytes(body)
        n = int(length)
        while len(body) < n:
            chunk = sock.recv(max(65536, n - len(body)))
            if not chunk:
                self.close()
                raise ConnectionError("server closed mid-body")
            body += chunk
        conn = headers.get(b"connection", b"")
        if conn == b"close" or (version == b"HTTP/1.0" and conn != b"keep-alive"):
            self.close()
        return int(status), bytes(body)


# --------------------------------------------------------------------------- /proc readers
def cpu_ticks_seconds(pid: int) -> float:
    """utime+stime of the whole process (exited threads included), 1/CLK_TCK resolution."""
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def cpu_sched_seconds(pid: int) -> float:
    """Sum of on-CPU time of the live threads (schedstat, ns); threads that exited are lost."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat: the whole machine, others included."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    total = sum(v[:8])  # guest time is already counted in user
    return total - idle, total


def host_busy_pct(before: tuple[float, float]) -> float:
    """Share of all CPUs busy since `before` (client, server and everyone else on the box)."""
    busy, total = host_cpu()
    return (busy - before[0]) / max(total - before[1], 1) * 100


def memory(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                n = int(value.split()[0])
                out[key] = n if key == "Threads" else n * 1024 / 1e6  # kB -> MB
    return {"rss_mb": out["VmRSS"], "hwm_mb": out["VmHWM"], "threads": out["Threads"]}


# --------------------------------------------------------------------------- body checks
def dcgm_pairs(body: bytes) -> set[tuple[str, str]]:
    """(family name, gpu) for every DCGM_* sample; raises ValueError on a parse error."""
    pairs: set[tuple[str, str]] = set()
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name.startswith("DCGM_"):
            pairs.update((fam.name, s.labels["gpu"]) for s in fam.samples if "gpu" in s.labels)
    return pairs


def self_metrics(body: bytes) -> dict[str, float]:
    """podgpu's self-metrics from a body, as `name{stage=..}` -> value."""
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name.startswith("podgpu_collect"):
            for s in fam.samples:
                key = s.name + (f"{{{s.labels['stage']}}}" if "stage" in s.labels else "")
                out[key] = s.value
    return out


def valid(body: bytes, gpus: int) -> bool:
    try:
        pairs = dcgm_pairs(body)
    except ValueError:
        return False
    return all(("DCGM_FI_DEV_GPU_UTIL", str(i)) in pairs for i in range(gpus))


# --------------------------------------------------------------------------- servers
SRC_OVERRIDE: list[str] = []  # set by --podgpu-rev: a src/ tree that shadows the editable install


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()  # PODGPU_ACCOUNTING: accounting off/on
           if not k.startswith(("DCGM_EXPORTER_", "PODGPU_")) or k == "PODGPU_ACCOUNTING"}
    env["NODE_NAME"] = NODE_NAME  # same Hostname label on both sides
    if SRC_OVERRIDE:  # both servers import podgpu from the same tree
        env["PYTHONPATH"] = os.pathsep.join([*SRC_OVERRIDE, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    return env


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(BENCH_DIR.parent), *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def podgpu_source(rev: str | None, tmp: Path) -> dict[str, Any]:
    """Which podgpu is measured: the working tree (default) or `git archive REV src` in `tmp`."""
    if rev is None:
        return {"tree": "working tree", "head": git("rev-parse", "HEAD"),
                "src_changes": git("status", "--porcelain", "--", "src").splitlines()}
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    archive = subprocess.run(["git", "-C", str(BENCH_DIR.parent), "archive", commit, "src"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    SRC_OVERRIDE[:] = [str(tmp / "src")]
    return {"tree": f"git archive {commit} src", "commit": commit}


class Server:
    """A server under test as a subprocess: podgpu or the baseline."""

    def __init__(self, kind: str, simulate: str, gpus: int, interval_ms: int, logdir: Path):
        self.kind, self.gpus, self.port = kind, gpus, free_port()
        if kind == "podgpu":
            exe = Path(sys.executable).with_name("podgpu")
            cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "podgpu"]
            self.cmd = [*cmd, "serve", "--simulate", simulate, "-c", str(interval_ms),
                        "--address", f"{HOST}:{self.port}"]
        else:
            self.cmd = [sys.executable, str(BASELINE), "--gpus", simulate,
                        "--address", HOST, "--port", str(self.port)]
        self.log = logdir / f"{kind}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start_and_wait_valid(self, timeout: float = 30.0) -> tuple[float, bytes]:
        """Start; poll until the first valid /metrics. Returns (seconds since start, body)."""
        with open(self.log, "wb") as log:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env=child_env())
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            client = HttpClient(self.port)
            try:
                status, body = client.get()
                t = time.perf_counter() - t0
            except OSError:
                time.sleep(0.005)
                continue
            finally:
                client.close()
            if status == 200 and valid(body, self.gpus):
                return t, body
            time.sleep(0.005)
        raise RuntimeError(f"{self.kind}: no valid /metrics within {timeout} s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> dict[str, Any]:
        assert self.proc is not None
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return {"stop_s": round(time.perf_counter() - t0, 3), "exit_code": rc}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


# --------------------------------------------------------------------------- load
def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def summarize(latencies: list[float], wall: float) -> dict[str, float]:
    lat = sorted(latencies)
    return {
        "scrapes": len(lat),
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
        "max_ms": lat[-1] * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3,
        "over_1s": sum(1 for x in lat if x >= 1.0),  # TCP SYN retransmits (full listen backlog)
        "scrapes_per_s": len(lat) / wall,
    }


def check(status: int, body: bytes) -> None:
    if status != 200 or not body.startswith(b"# HELP DCGM_"):
        raise RuntimeError(f"bad scrape: {status} {body[:80]!r}")


def sequential(port: int, n: int) -> tuple[dict[str, float], int]:
    client = HttpClient(port)
    lat = []
    t_start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        status, body = client.get()
        lat.append(time.perf_counter() - t0)
        check(status, body)
    wall = time.perf_counter() - t_start
    client.close()
    return summarize(lat, wall), client.connects


def concurrent(port: int, n: int, clients: int,
               client_for: Callable[[int], HttpClient] = HttpClient) -> tuple[dict[str, float], int]:
    """`clients` keep-alive clients (`client_for(port)`), each connected once before the clock
    starts, `n` scrapes in all; the summary and the connections they made."""
    per = max(1, n // clients)
    lats: list[list[float]] = [[] for _ in range(clients)]
    conns = [0] * clients
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients + 1)

    def worker(i: int) -> None:
        client = client_for(port)
        try:
            client.get()  # connect and warm this connection before the clock starts
            barrier.wait()
            for _ in range(per):
                t0 = time.perf_counter()
                status, body = client.get()
                lats[i].append(time.perf_counter() - t0)
                check(status, body)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
            barrier.abort()
        finally:
            conns[i] = client.connects
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()  # broken if a worker failed before the start; its error is raised below
    t_start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    if errors:
        raise RuntimeError(f"concurrent scrape failed: {errors[0]!r}")
    return summarize([x for lat in lats for x in lat], wall), sum(conns)


def idle_window(srv: Server, seconds: float) -> dict[str, float]:
    """CPU of podgpu over `seconds` with no scrapes, per cycle it ran in that window."""
    client = HttpClient(srv.port)
    _, before = client.get()
    client.close()
    c0 = self_metrics(before)["podgpu_collect_cycles_total"]
    tick0, sched0, w0 = cpu_ticks_seconds(srv.pid), cpu_sched_seconds(srv.pid), time.perf_counter()
    h0 = host_cpu()
    time.sleep(seconds)
    host = host_busy_pct(h0)
    tick1, sched1, w1 = cpu_ticks_seconds(srv.pid), cpu_sched_seconds(srv.pid), time.perf_counter()
    _, after = client.get()
    client.close()
    sm = self_metrics(after)
    cycles = sm["podgpu_collect_cycles_total"] - c0
    wall = w1 - w0
    return {
        "window_s": wall,
        "cycles": cycles,
        "cycles_per_s": cycles / wall,
        "cpu_ms_per_cycle_stat": (tick1 - tick0) / max(cycles, 1) * 1e3,
        "cpu_ms_per_cycle_sched": (sched1 - sched0) / max(cycles, 1) * 1e3,
        "cpu_percent_sched": (sched1 - sched0) / wall * 100,
        "host_busy_pct": host,  # what everyone else on the machine was doing meanwhile
        "collect_backend_ms": sm.get("podgpu_collect_duration_seconds{backend}", float("nan")) * 1e3,
        "collect_render_ms": sm.get("podgpu_collect_duration_seconds{render}", float("nan")) * 1e3,
        "collect_total_ms": sm.get("podgpu_collect_duration_seconds{total}", float("nan")) * 1e3,
    }


# --------------------------------------------------------------------------- one measurement
def measure(kind: str, a: argparse.Namespace, logdir: Path) -> tuple[dict[str, Any], bytes, str]:
    srv = Server(kind, a.gpus, a.gpu_count, a.interval_ms, logdir)
    load1 = float(Path("/proc/loadavg").read_text().split()[0])
    h0 = host_cpu()
    first_s, body = srv.start_and_wait_valid()
    try:
        r: dict[str, Any] = {"first_valid_s": first_s, "body_bytes": len(body),
                             "rss_mb_at_first_valid": memory(srv.pid)["rss_mb"],
                             "host_loadavg1_before": load1,
                             "host_busy_pct_startup": host_busy_pct(h0)}
        sequential(srv.port, a.warmup)
        cpu0, h0 = cpu_ticks_seconds(srv.pid), host_cpu()
        r["seq"], r["seq_connections"] = sequential(srv.port, a.scrapes)
        r["server_cpu_ms_per_scrape_seq"] = (cpu_ticks_seconds(srv.pid) - cpu0) / a.scrapes * 1e3
        r["host_busy_pct_seq"] = host_busy_pct(h0)
        cpu0, h0 = cpu_ticks_seconds(srv.pid), host_cpu()
        r["conc"], r["conc_connections"] = concurrent(srv.port, a.scrapes, a.concurrency)
        r["server_cpu_ms_per_scrape_conc"] = ((cpu_ticks_seconds(srv.pid) - cpu0)
                                              / r["conc"]["scrapes"] * 1e3)
        r["host_busy_pct_conc"] = host_busy_pct(h0)
        r.update(memory(srv.pid))  # after the load
        if kind == "podgpu":
            r["idle"] = idle_window(srv, a.idle_seconds)
    finally:
        r_stop = srv.stop()
    r.update(r_stop)
    return r, body, srv.log_text()


def interval_point(interval_ms: int, a: argparse.Namespace, logdir: Path) -> dict[str, float]:
    srv = Server("podgpu", a.gpus, a.gpu_count, interval_ms, logdir)
    srv.start_and_wait_valid()
    try:
        time.sleep(a.settle_seconds)
        r = idle_window(srv, a.interval_seconds)
        r["rss_mb"] = memory(srv.pid)["rss_mb"]
    finally:
        srv.stop()
    return {"interval_ms": interval_ms, **r}


# --------------------------------------------------------------------------- aggregation
def median_tree(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric leaf across runs of identical shape."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        vals = [r[key] for r in runs if key in r]
        if isinstance(first, dict):
            out[key] = median_tree(vals)
        elif isinstance(first, (int, float)) and not isinstance(first, bool):
            out[key] = statistics.median(vals)
    return out


def ratios(p: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return {
        "seq_scrapes_per_s": p["seq"]["scrapes_per_s"] / b["seq"]["scrapes_per_s"],
        "conc_scrapes_per_s": p["conc"]["scrapes_per_s"] / b["conc"]["scrapes_per_s"],
        "seq_p99_baseline_over_podgpu": b["seq"]["p99_ms"] / p["seq"]["p99_ms"],
        "conc_p99_baseline_over_podgpu": b["conc"]["p99_ms"] / p["conc"]["p99_ms"],
        "server_cpu_per_scrape_baseline_over_podgpu":
            b["server_cpu_ms_per_scrape_seq"] / max(p["server_cpu_ms_per_scrape_seq"], 1e-9),
    }


def targets(med: dict[str, Any]) -> dict[str, dict[str, Any]]:
    p, r = med["podgpu"], med["ratios"]
    rows = {
        "seq_p99_ms": (p["seq"]["p99_ms"], "<=", TARGETS["seq_p99_ms_max"]),
        "seq_scrapes_per_s_ratio": (r["seq_scrapes_per_s"], ">=", TARGETS["scrapes_per_s_ratio_min"]),
        "conc_scrapes_per_s_ratio": (r["conc_scrapes_per_s"], ">=",
                                     TARGETS["scrapes_per_s_ratio_min"]),
        "rss_mb": (p["rss_mb"], "<=", TARGETS["rss_mb_max"]),
        "first_valid_s": (p["first_valid_s"], "<=", TARGETS["first_valid_s_max"]),
    }
    return {k: {"value": v, "op": op, "target": t, "met": v <= t if op == "<=" else v >= t}
            for k, (v, op, t) in rows.items()}


# --------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="podgpu exporter-core benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gpus", default="8", help="simulated node: N or NxMODEL")
    p.add_argument("--out", required=True, help="JSON results file")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--scrapes", type=int, default=2000, help="per mode and server")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--interval-ms", type=int, default=1000, help="podgpu -c for the main runs")
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--intervals", default="100,500,1000,5000", help="-c values (ms) to sweep")
    p.add_argument("--interval-seconds", type=float, default=10.0, help="idle window per -c")
    p.add_argument("--settle-seconds", type=float, default=1.0)
    p.add_argument("--podgpu-rev", default=None,
                   help="measure this commit's src/ (git archive) instead of the working tree")
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: 1 repeat, 1 s idle, short sweep (numbers are not results)")
    a = p.parse_args(argv)
    if a.quick:
        a.repeat, a.warmup, a.idle_seconds = 1, 5, 1.0
        a.intervals, a.interval_seconds, a.settle_seconds = "100,1000", 1.0, 0.2
    a.gpu_count = int(a.gpus.partition("x")[0])
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    runs: list[dict[str, Any]] = []
    sweep: list[dict[str, float]] = []
    bodies: dict[str, bytes] = {}
    logs: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="podgpu-bench-") as tmp:
        logdir = Path(tmp)
        source = podgpu_source(a.podgpu_rev, logdir)
        for i in range(a.repeat):
            order = ("podgpu", "baseline") if i % 2 == 0 else ("baseline", "podgpu")
            run: dict[str, Any] = {"order": list(order)}
            for kind in order:
                print(f"[repeat {i + 1}/{a.repeat}] {kind} ...", file=sys.stderr, flush=True)
                run[kind], bodies[kind], logs[kind] = measure(kind, a, logdir)
            run["ratios"] = ratios(run["podgpu"], run["baseline"])
            runs.append(run)
            for ms in (int(x) for x in a.intervals.split(",")):
                print(f"[repeat {i + 1}/{a.repeat}] podgpu -c {ms} idle ...", file=sys.stderr,
                      flush=True)
                sweep.append(interval_point(ms, a, logdir))

    p_pairs, b_pairs = dcgm_pairs(bodies["podgpu"]), dcgm_pairs(bodies["baseline"])
    med = {k: median_tree([r[k] for r in runs]) for k in ("podgpu", "baseline", "ratios")}
    by_interval: dict[int, list[dict[str, float]]] = {}
    for pt in sweep:
        by_interval.setdefault(int(pt["interval_ms"]), []).append(pt)
    result = {
        "meta": {
            "started_utc": started.isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None
            else " ".join(argv),
            "gpus": a.gpus, "repeat": a.repeat, "scrapes": a.scrapes, "warmup": a.warmup,
            "concurrency": a.concurrency, "interval_ms": a.interval_ms,
            "idle_seconds": a.idle_seconds, "quick": a.quick,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "clk_tck": CLK_TCK,
            "podgpu_source": source,
            "podgpu_cmd": Server("podgpu", a.gpus, a.gpu_count, a.interval_ms, Path()).cmd[1:],
            "units": "latency ms; memory MB (10^6 bytes); cpu ms",
        },
        "targets": targets(med),
        "median": med,
        "runs": runs,
        "interval_sweep": {
            "median": [median_tree(pts) for _, pts in sorted(by_interval.items())],
            "points": sweep,
        },
        "series_check": {
            "equal": p_pairs == b_pairs,
            "podgpu": sorted(p_pairs),
            "baseline": sorted(b_pairs),
            "only_podgpu": sorted(p_pairs - b_pairs),
            "only_baseline": sorted(b_pairs - p_pairs),
        },
        "logs": {k: v.splitlines()[:20] for k, v in logs.items()},
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    return 0


def report(res: dict[str, Any]) -> str:
    """A short human summary (RESULTS.md tables are written from the JSON by hand)."""
    med = res["median"]
    lines = ["| | podgpu | baseline | ratio |", "|---|---|---|---|"]
    p, b, r = med["podgpu"], med["baseline"], med["ratios"]
    lines.append(f"| first valid /metrics (s) | {p['first_valid_s']:.3f} | "
                 f"{b['first_valid_s']:.3f} | |")
    for mode in ("seq", "conc"):
        lines.append(f"| {mode} p50 / p99 (ms) | {p[mode]['p50_ms']:.3f} / {p[mode]['p99_ms']:.3f}"
                     f" | {b[mode]['p50_ms']:.3f} / {b[mode]['p99_ms']:.3f} | |")
        lines.append(f"| {mode} scrapes/s | {p[mode]['scrapes_per_s']:.0f} | "
                     f"{b[mode]['scrapes_per_s']:.0f} | {r[mode + '_scrapes_per_s']:.1f}x |")
    lines.append(f"| RSS after load (MB) | {p['rss_mb']:.1f} | {b['rss_mb']:.1f} | |")
    lines.append(f"| podgpu CPU/cycle idle (ms, sched) | {p['idle']['cpu_ms_per_cycle_sched']:.2f}"
                 " | | |")
    lines.append("")
    lines.append("| -c (ms) | cycles/s | CPU % | CPU ms/cycle |")
    lines.append("|---|---|---|---|")
    for pt in res["interval_sweep"]["median"]:
        lines.append(f"| {pt['interval_ms']:.0f} | {pt['cycles_per_s']:.2f} | "
                     f"{pt['cpu_percent_sched']:.2f} | {pt['cpu_ms_per_cycle_sched']:.2f} |")
    lines.append("")
    for k, t in res["targets"].items():
        lines.append(f"{k}: {t['value']:.3f} {t['op']} {t['target']} -> "
                     f"{'met' if t['met'] else 'MISSED'}")
    lines.append(f"series check equal: {res['series_check']['equal']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
