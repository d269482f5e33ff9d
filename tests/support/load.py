"""HTTP load against `podgpu serve --simulate 8`: well-behaved scrapers while slow and half-open
connections attack the same port.

    .venv/bin/python -m bench.load --scrapers 100 --duration 60 --slow 1000 --half-open 20000 \
        --out bench/results/load-<date>.json

- `--scrapers` keep-alive clients scrape /metrics back to back (closed loop) for `--duration`
  seconds; a scrape fails on any status but 200, a body without GPU series, an error or 10 s
  without an answer (Prometheus' default scrape timeout). Latency percentiles are recorded.
- `--slow` slowloris connections send a partial request head and then one header byte every
  `--slow-every` seconds; closed ones are reopened at once (the attacker keeps its count up).
- `--half-open` connections (in helper processes, 8,000 descriptors each) connect, send part of a
  request head and hold, without reopening.
- podgpu's log is counted (lines, bytes), and its RSS and descriptors are sampled.
The short form runs in CI: tests/integration/test_load_short.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.harness import ROOT, PeakSampler, Serve, pct, rss_fds

PER_HELPER = 8000
PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nX-Slow: "


@dataclass
class LoadResult:
    command: list[str]
    scrapers: int
    scrape_every_s: float
    duration_s: float
    slow: int
    half_open: int
    scrapes: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    scrapes_per_s: float = 0.0
    slow_reopened: int = 0
    half_open_opened: int = 0
    log_lines: int = 0
    log_bytes: int = 0
    rss_mib_before: float = 0.0
    rss_mib_max: float = 0.0
    fds_max: int = 0
    exit_status: int | None = None








async def scraper(port: int, until: float, every: float, offset: float, res: LoadResult,
                  lat: list[float]) -> None:
    """Back to back when `every` is 0, else one scrape per `every` seconds (as Prometheus)."""
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    next_at = time.monotonic() + offset
    while time.monotonic() < until:
        if every:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at += every
        t0 = time.perf_counter()
        try:
            if writer is None:
                # Unpacked apart from the await: inferred in the context of the Optional
                # variables, wait_for's result would not narrow `writer`.
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
                reader, writer = conn
            assert reader is not None
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nAccept-Encoding: gzip\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status = int(head.split(b" ", 2)[1])
            length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            body = await asyncio.wait_for(reader.readexactly(length), 10)
            if status != 200 or len(body) < 100:
                raise ValueError(f"status {status}, {len(body)} bytes")
            lat.append((time.perf_counter() - t0) * 1000)
            res.scrapes += 1
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, StopIteration) as exc:
            res.failed += 1
            if len(res.failures) < 20:
                res.failures.append(f"{type(exc).__name__}: {exc}"[:200])
            if writer is not None:
                writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


async def slowloris(port: int, until: float, every: float, res: LoadResult) -> None:
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(PARTIAL)
            while time.monotonic() < until:
                await asyncio.sleep(every)
                if reader.at_eof():
                    break
                writer.write(b"a")
                await writer.drain()
            writer.close()
        except OSError:
            await asyncio.sleep(0.1)
        res.slow_reopened += 1


async def run(args: argparse.Namespace, port: int, res: LoadResult) -> list[float]:
    until = time.monotonic() + args.duration
    lat: list[float] = []
    tasks = [asyncio.create_task(slowloris(port, until, args.slow_every, res))
             for _ in range(args.slow)]
    await asyncio.sleep(0.5 if args.slow else 0)
    every = args.scrape_every
    tasks += [asyncio.create_task(scraper(port, until, every, every * k / args.scrapers, res, lat))
              for k in range(args.scrapers)]
    await asyncio.gather(*tasks)
    return lat


def helper(port: int, count: int, hold: float) -> int:
    """Attacker process: `count` half-open connections held for `hold` seconds."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    end = time.monotonic() + hold
    for i in range(count):
        if time.monotonic() > end:
            break
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(PARTIAL)
            socks.append(s)
        except OSError:
            time.sleep(0.01)
        if i % 500 == 499:
            print(len(socks), flush=True)
    print(len(socks), flush=True)
    time.sleep(max(0.0, end - time.monotonic()))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapers", type=int, default=100)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--scrape-every", type=float, default=0.0,
                    help="seconds between one scraper's scrapes; 0: back to back")
    ap.add_argument("--slow", type=int, default=1000)
    ap.add_argument("--slow-every", type=float, default=5.0)
    ap.add_argument("--half-open", type=int, default=0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra podgpu serve argument (repeatable)")
    ap.add_argument("--src", type=Path, default=ROOT / "src",
                    help="the podgpu sources to run (e.g. a `git archive` of an older commit)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--helper", nargs=3, type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.helper:
        return helper(int(args.helper[0]), int(args.helper[1]), args.helper[2])
    res = run_load(args)
    doc = asdict(res)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0 if res.failed == 0 and res.exit_status == 0 else 1


def run_load(args: argparse.Namespace) -> LoadResult:
    agent = Serve(["--simulate", f"{args.gpus}xH100", *args.serve_arg],
                  src=getattr(args, "src", ROOT / "src"))
    port = agent.port
    res = LoadResult(agent.cmd, args.scrapers, args.scrape_every, args.duration, args.slow,
                     args.half_open)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    helpers: list[subprocess.Popen[str]] = []
    try:
        agent.wait_ready()
        res.rss_mib_before = round(rss_fds(agent.pid)[0], 1)
        left = args.half_open
        while left > 0:
            n = min(PER_HELPER, left)
            helpers.append(subprocess.Popen(
                [sys.executable, "-m", "tests.support.load", "--helper", str(port), str(n),
                 str(args.duration + 5)], stdout=subprocess.PIPE, text=True, cwd=ROOT))
            left -= n
        with PeakSampler(agent.pid, 0.5) as peak:
            t0 = time.monotonic()
            lat = asyncio.run(run(args, port, res))
            elapsed = time.monotonic() - t0
        res.rss_mib_max, res.fds_max = peak.rss_mib_max, peak.fds_max
        res.latency_ms = {"p50": pct(lat, 0.5), "p90": pct(lat, 0.9), "p99": pct(lat, 0.99),
                          "max": round(max(lat), 2) if lat else 0.0}
        res.scrapes_per_s = round(res.scrapes / elapsed, 1)
        for h in helpers:
            h.terminate()
            out, _ = h.communicate(timeout=30)
            res.half_open_opened += int((out.split() or ["0"])[-1])
    finally:
        for h in helpers:
            if h.poll() is None:
                h.kill()
        res.exit_status, err = agent.stop()
    data = err.encode()
    res.log_lines, res.log_bytes = data.count(b"\n"), len(data)
    return res


if __name__ == "__main__":
    raise SystemExit(main())
