"""The listener's memory budget attacked with each shape of client that held memory before, and
with all of them at once, beside honest scrapers (one plain, one TLS) served every second:

    .venv/bin/python -m bench.listener_shapes SHAPE [--conns 2000] [--duration 30]
        [--gpus 64] [--sources 250] [--src DIR] [--out X.json]

Shapes (each attacking connection is replaced as soon as podgpu closes it: reconnecting):
- `hello-big`: a TLS record layer carrying one ClientHello of ~128 KiB, sent whole if podgpu
  takes it, then nothing;
- `hello-cap`: a ClientHello of 16,000 bytes (just under the cap) of which 15,000 are sent;
- `hello-records`: the same 15,000 bytes in 100-byte records (the gate reads each whole record);
- `pipeline`: plain HTTP, 400 pipelined `GET /metrics` (identity: the 64-GPU ~380 KB body),
  never a byte read, a 4 KiB receive window;
- `slow-reader`: one `GET /metrics` (identity), then 1 byte read per second (over TLS: one
  record a second);
- `body`: `POST /health` announcing 100 GB, then body bytes as fast as podgpu takes them;
- `mix`: all of the above but `hello-records` at once, `--conns` split evenly (without `--tls`:
  the plain ones).

`--tls` runs the agent with TLS (always for `hello-*`): the other shapes complete a handshake
first, and the honest scraper is a TLS one.

Connections come from `--sources` loopback addresses (127.0.x.y). RSS of the agent is sampled
every 0.25 s: before (after 3 s of scrapes), the maximum during the attack, and 5 s after it.
Passes when every scrape succeeded and RSS grew at most `--max-rss-growth-mib` (40).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness import ROOT, PeakSampler, Serve, pct, unverified_tls
from tests.support.listener_attacks import (
    ListenerRun,
    finish,
    report,
    scrapers,
    settled_rss,
    source,
    tcp_closed,
    tls_config,
    warm_up,
)

SHAPES = ("hello-big", "hello-cap", "pipeline", "slow-reader", "body")
"""The shapes `mix` runs at once."""
GET = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nAccept-Encoding: identity\r\n\r\n"
POST = b"POST /health HTTP/1.1\r\nHost: podgpu\r\nContent-Length: 100000000000\r\n\r\n"
TLS_SHAPES = {"hello-big", "hello-cap", "hello-records"}
"""Shapes that only exist over TLS; the others speak TLS (after a handshake) with `--tls`."""


def hello(declared: int, sent: int, record: int = 16384) -> bytes:
    """TLS handshake records of `record` bytes carrying the first `sent` bytes of a ClientHello
    of `declared`."""
    message = b"\x01" + declared.to_bytes(3, "big") + os.urandom(declared)
    message = message[:sent]
    return b"".join(b"\x16\x03\x01" + len(c).to_bytes(2, "big") + c
                    for c in (message[i:i + record] for i in range(0, len(message), record)))


@dataclass(kw_only=True)
class ShapeResult(ListenerRun):
    shape: str
    gpus: int
    tls: bool = False
    rss_mib_after: float = 0.0
    cpu_s: float = 0.0
    """The agent's CPU seconds (user + system) during the attack."""


def _open(shape: str, port: int, src: tuple[str, int],
          tls: ssl.SSLContext | None) -> socket.socket:
    s = socket.socket()
    if shape in ("pipeline", "slow-reader"):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(5)
    if src[0]:
        s.bind(src)
    s.connect(("127.0.0.1", port))
    if shape == "hello-big":
        s.sendall(hello(130_000, 129_900))
    elif shape == "hello-cap":
        s.sendall(hello(16_000, 15_000))
    elif shape == "hello-records":
        s.sendall(hello(16_000, 15_000, record=100))
    else:
        if tls is not None:
            s = tls.wrap_socket(s)
        s.sendall({"pipeline": GET * 400, "slow-reader": GET, "body": POST}[shape])
    s.setblocking(False)
    return s


def attacker(shape: str, port: int, conns: int, duration: float, sources: int,
             use_tls: bool) -> dict[str, int]:
    """Keeps `conns` connections of `shape` (or of every shape: `mix`) open for `duration`."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    shapes = tuple(s for s in SHAPES if use_tls or s not in TLS_SHAPES) if shape == "mix" \
        else (shape,)
    quota = max(1, conns // len(shapes))
    tls = unverified_tls() if use_tls else None
    live: dict[socket.socket, str] = {}
    count = dict.fromkeys(shapes, 0)
    opened = closed = 0
    chunk = b"x" * 65536
    end = time.monotonic() + duration
    last_read = 0.0
    while time.monotonic() < end:
        for sh in shapes:
            while count[sh] < quota and time.monotonic() < end:
                try:
                    s = _open(sh, port, source(opened, sources), tls)
                except OSError:  # refused or reset at once (hello-big): counted as closed
                    opened += 1
                    closed += 1
                    break
                live[s] = sh
                count[sh] += 1
                opened += 1
        now = time.monotonic()
        for s, sh in list(live.items()):
            gone = tcp_closed(s)
            if not gone and sh == "body":
                try:
                    for _ in range(4):
                        s.send(chunk)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
                except OSError:
                    gone = True
            if not gone and sh == "slow-reader" and now - last_read >= 1.0:
                try:
                    gone = s.recv(1) == b""
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
                except OSError:
                    gone = True
            if gone:
                del live[s]
                count[sh] -= 1
                closed += 1
                s.close()
        if now - last_read >= 1.0:
            last_read = now
        time.sleep(0.25)
    for s in live:
        s.close()
    return {"opened": opened, "closed": closed}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_shape(shape: str, *, conns: int, duration: float, tls: bool, gpus: int = 64,
              sources: int = 250, max_rss_growth_mib: float = 40.0,
              src: Path = ROOT / "src", settle: float = 5.0) -> ShapeResult:
    """One shape (or the mix) against `podgpu serve`; `rss_mib_after` is read `settle` seconds
    after the attack ends (0: not read, for callers that do not look at it)."""
    tmp = Path(tempfile.mkdtemp(prefix="podgpu-shapes-"))
    args = ["--simulate", f"{gpus}xH100", "-c", "1000"]
    if tls:
        args += ["--web-config-file", str(tls_config(tmp))]
    agent = Serve(args, src=src, tls=tls)
    client_tls = unverified_tls() if tls else None
    res = ShapeResult(shape=shape, command=agent.cmd, conns=conns, duration_s=duration,
                      gpus=gpus, sources=sources, tls=tls)
    try:
        warm_up(agent, client_tls, 1, res)
        with PeakSampler(agent.pid, 0.25) as peak:
            cpu0 = cpu_seconds(agent.pid)
            helper = subprocess.Popen(
                [sys.executable, "-m", "tests.support.listener_shapes", "--helper", shape,
                 str(agent.port), str(conns), str(duration), str(sources), str(int(tls))],
                stdout=subprocess.PIPE, text=True)
            lat = asyncio.run(scrapers(agent.port, client_tls, 1, duration, res))
            out, _ = helper.communicate(timeout=duration + 120)
            res.cpu_s = round(cpu_seconds(agent.pid) - cpu0, 1)
        res.rss_mib_max, res.fds_max = peak.rss_mib_max, peak.fds_max
        res.rss_mib_after = settled_rss(agent, settle)
        got = json.loads(out)
        res.attack_opened, res.attack_closed_by_server = got["opened"], got["closed"]
        res.scrape_ms_p50, res.scrape_ms_p99 = pct(lat, 0.5), pct(lat, 0.99)
    finally:
        finish(agent, res, 6, max_rss_growth_mib)
    return res


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--helper":
        shape, port, conns, duration, sources, tls = sys.argv[2:8]
        print(json.dumps(attacker(shape, int(port), int(conns), float(duration), int(sources),
                                  tls == "1")))
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("shape", choices=(*SHAPES, "hello-records", "mix"))
    ap.add_argument("--tls", action="store_true",
                    help="the agent serves TLS; every shape speaks TLS (hello-* always do)")
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--sources", type=int, default=250)
    ap.add_argument("--max-rss-growth-mib", type=float, default=40.0)
    ap.add_argument("--src", type=Path, default=ROOT / "src",
                    help="the podgpu sources to run (e.g. a `git archive` of an older commit)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = run_shape(args.shape, conns=args.conns, duration=args.duration,
                    tls=args.tls or args.shape in TLS_SHAPES, gpus=args.gpus,
                    sources=args.sources, max_rss_growth_mib=args.max_rss_growth_mib,
                    src=args.src)
    return report(res, args.out)


if __name__ == "__main__":
    sys.exit(main())
