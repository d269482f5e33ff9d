"""Attacks on the listener that reach it before a request completes, beside
Prometheus-like scrapers:

    .venv/bin/python -m bench.listener_attacks tls-silent --conns 1000 --duration 60 --out X.json
    .venv/bin/python -m bench.listener_attacks pipeline --conns 2000 --duration 60 --out X.json
    .venv/bin/python -m bench.listener_attacks pipeline --identity --sources 2000 --conns 2000 ...
    .venv/bin/python -m bench.listener_attacks tls-hello --conns 2000 --duration 60 --out X.json
    .venv/bin/python -m bench.listener_attacks memory 1000 [SRC]  # KiB per open connection, by kind

- `tls-silent`: podgpu serves TLS (a throw-away certificate); each attacking connection is a TCP
  connect to the TLS port that sends nothing.
- `pipeline`: plain HTTP; each attacking connection sends `--pipelined` GETs for /metrics at once
  (no gzip: 53 KB answers) and never reads a byte. Its receive buffer is set to 16 KiB so the
  attack does not park gigabytes in the kernel of a shared machine; podgpu cannot tell.
- `--identity` adds `Accept-Encoding: identity` to each pipelined GET (the uncompressed answer);
  `--sources N` spreads the attacking connections over N loopback source addresses
  (127.0.x.y), as N clients would.
- `tls-hello`: each attacking connection sends the first 6 bytes of a TLS record holding a
  ClientHello and stalls there (the handshake begun, never finished).
- an attacker process keeps `--conns` connections open for `--duration` seconds: a connection
  podgpu closes (seen as TCP state CLOSE/CLOSE_WAIT through TCP_INFO, polled every 0.25 s, no read
  needed) is counted with its lifetime and replaced at once.
- `--scrapers` scrape /metrics once a second each (over TLS for `tls-silent`), a new connection per
  scrape; one fails on any status but 200, an error, or 10 s without the whole answer
  (Prometheus' default scrape timeout).
- podgpu's RSS is sampled every 0.25 s: before the attack (after 3 s of scrapes) and the maximum;
  `rss_mib_after_close` is sampled `settle` (5) s after the attack's connections are closed.

Passes when every scrape succeeded, RSS grew at most `--max-rss-growth-mib`, and no attacking
connection lived longer than the request deadline + 5 s (connections still open when the attack
stops count with their age then). The short form runs in CI:
tests/integration/test_listener_attacks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.harness import ROOT, PeakSampler, Serve, pct, rss_fds, unverified_tls
from tests.tlsutil import Pki

GET = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\n\r\n"
_CLOSED_STATES = {7, 8, 9}  # TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK (linux/tcp_states.h)


@dataclass(kw_only=True)
class ListenerRun:
    """What an attack run and a shape run (listener_shapes.py) both record: the attacking
    connections, the honest scrapes beside them, and the agent's peak memory and log."""

    command: list[str]
    conns: int
    duration_s: float
    sources: int = 1
    scrapes: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    scrape_ms_p50: float = 0.0
    scrape_ms_p99: float = 0.0
    attack_opened: int = 0
    attack_closed_by_server: int = 0
    rss_mib_before: float = 0.0
    rss_mib_max: float = 0.0
    rss_mib_growth: float = 0.0
    fds_max: int = 0
    log_lines: int = 0
    log_tail: list[str] = field(default_factory=list)
    exit_status: int | None = None
    passed: bool = False


@dataclass(kw_only=True)
class AttackResult(ListenerRun):
    attack: str
    request_timeout_s: float
    scrapers: int
    scrape_ms_max: float = 0.0
    attack_lifetime_s_max: float = 0.0
    attack_lifetime_s_p50: float = 0.0
    rss_mib_after_close: float = 0.0
    identity: bool = False


def tcp_closed(s: socket.socket) -> bool:
    """True once the peer closed or reset the connection, without reading from it."""
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return True
    return struct.unpack("B", info[:1])[0] in _CLOSED_STATES


GET_IDENTITY = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nAccept-Encoding: identity\r\n\r\n"
HELLO_START = b"\x16\x03\x01\x02\x00\x01"  # a handshake record of 512 bytes: a ClientHello begins


def source(i: int, sources: int) -> tuple[str, int]:
    """The i-th connection's loopback source address, one of `sources`."""
    k = i % sources
    return (f"127.0.{k // 250 + 1}.{k % 250 + 1}", 0) if sources > 1 else ("", 0)


def attacker(attack: str, port: int, conns: int, duration: float, pipelined: int,
             identity: bool = False, sources: int = 1) -> dict[str, object]:
    """Keeps `conns` attacking connections open for `duration` s; returns lifetimes (s)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    payload = ((GET_IDENTITY if identity else GET) * pipelined if attack == "pipeline"
               else HELLO_START if attack == "tls-hello" else b"")
    live: dict[socket.socket, float] = {}
    lifetimes: list[float] = []
    opened = 0
    end = time.monotonic() + duration
    while time.monotonic() < end:
        while len(live) < conns and time.monotonic() < end:
            s = socket.socket()
            if attack == "pipeline":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            s.settimeout(5)
            try:
                if sources > 1:
                    s.bind(source(opened, sources))
                s.connect(("127.0.0.1", port))
                if payload:
                    s.sendall(payload)
            except OSError:
                s.close()
                time.sleep(0.01)
                continue
            live[s] = time.monotonic()
            opened += 1
        time.sleep(0.25)
        now = time.monotonic()
        for s in [s for s in live if tcp_closed(s)]:
            lifetimes.append(now - live.pop(s))
            s.close()
    now = time.monotonic()
    still = [now - t for t in live.values()]
    for s in live:
        s.close()
    return {"opened": opened, "closed": lifetimes, "still_open": still}


async def scrape_loop(port: int, tls: ssl.SSLContext | None, until: float, offset: float,
                      res: ListenerRun, lat: list[float]) -> None:
    next_at = time.monotonic() + offset
    while next_at < until:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        next_at += 1.0
        t0 = time.perf_counter()
        writer = None
        try:
            async def once() -> None:
                nonlocal writer
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nConnection: close\r\n\r\n")
                data = await reader.read()
                if not data.startswith(b"HTTP/1.1 200 ") or b"DCGM_FI_DEV_" not in data:
                    raise ValueError(data[:80].decode("latin-1"))

            await asyncio.wait_for(once(), 10)
            lat.append((time.perf_counter() - t0) * 1000)
            res.scrapes += 1
        except (TimeoutError, OSError, ValueError) as exc:
            res.failed += 1
            if len(res.failures) < 20:
                res.failures.append(f"{type(exc).__name__}: {exc}"[:200])
        finally:
            if writer is not None:
                writer.close()


async def scrapers(port: int, tls: ssl.SSLContext | None, n: int, seconds: float,
                   res: ListenerRun) -> list[float]:
    lat: list[float] = []
    until = time.monotonic() + seconds
    await asyncio.gather(*(scrape_loop(port, tls, until, k / n, res, lat) for k in range(n)))
    return lat


def warm_up(agent: Serve, tls: ssl.SSLContext | None, n: int, res: ListenerRun) -> None:
    """Ready, then 3 s of `n` scrapers; the RSS after them is the run's baseline and their
    scrapes are not counted."""
    agent.wait_ready()
    asyncio.run(scrapers(agent.port, tls, n, 3.0, res))
    res.rss_mib_before = round(rss_fds(agent.pid)[0], 1)
    res.scrapes = 0


def settled_rss(agent: Serve, settle: float) -> float:
    """The agent's RSS (MiB) `settle` s after the attack's connections are closed: is the
    memory given back? 0.0 when `settle` is 0 (not read: the tests do not look at it)."""
    if not settle:
        return 0.0
    time.sleep(settle)
    return round(rss_fds(agent.pid)[0], 1)


def finish(agent: Serve, res: ListenerRun, tail: int, max_rss_growth_mib: float) -> None:
    """Stops the agent; records its log (line count, the last `tail` lines), the RSS growth and
    the verdict every run shares: all scrapes answered, a clean exit, growth within bound."""
    res.exit_status, err = agent.stop()
    lines = err.splitlines()
    res.log_lines, res.log_tail = len(lines), [line[:300] for line in lines[-tail:]]
    res.rss_mib_growth = round(res.rss_mib_max - res.rss_mib_before, 1)
    res.passed = (res.failed == 0 and res.scrapes > 0 and res.exit_status == 0
                  and res.rss_mib_growth <= max_rss_growth_mib)


def report(res: ListenerRun, out: Path | None) -> int:
    """Prints the run as JSON, writes it to `out` too if given; the exit status: 0 if it passed."""
    text = json.dumps(asdict(res), indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    return 0 if res.passed else 1


def tls_config(directory: Path) -> Path:
    leaf = Pki(directory / "pki", "bench").leaf("server", server=True)
    config = directory / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {leaf.cert}\n  key_file: {leaf.key}\n")
    return config


def run_attack(attack: str, *, conns: int, duration: float, scrapers_n: int = 20,
               request_timeout: float = 15.0, pipelined: int = 400, gpus: int = 8,
               max_rss_growth_mib: float = 40.0, serve_args: tuple[str, ...] = (),
               src: Path = ROOT / "src", identity: bool = False, sources: int = 1,
               settle: float = 5.0) -> AttackResult:
    tmp = Path(tempfile.mkdtemp(prefix="podgpu-attack-"))
    args = ["--simulate", f"{gpus}xH100", "--http-request-timeout", f"{request_timeout:g}", *serve_args]
    client_tls = None
    if attack.startswith("tls"):
        args += ["--web-config-file", str(tls_config(tmp))]
        client_tls = unverified_tls()
    agent = Serve(args, src=src, tls=client_tls is not None)
    port = agent.port
    res = AttackResult(attack=attack, command=agent.cmd, conns=conns, duration_s=duration,
                       request_timeout_s=request_timeout, scrapers=scrapers_n, identity=identity,
                       sources=sources)
    try:
        warm_up(agent, client_tls, scrapers_n, res)
        with PeakSampler(agent.pid, 0.25) as peak:
            helper = subprocess.Popen(
                [sys.executable, "-m", "tests.support.listener_attacks", "--helper", attack,
                 str(port), str(conns), str(duration), str(pipelined), str(int(identity)),
                 str(sources)],
                stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)
            lat = asyncio.run(scrapers(port, client_tls, scrapers_n, duration - 1.0, res))
            out, _ = helper.communicate(timeout=duration + 60)
        res.rss_mib_max, res.fds_max = peak.rss_mib_max, peak.fds_max
        res.rss_mib_after_close = settled_rss(agent, settle)
        got = json.loads(out)
        closed: list[float] = got["closed"]
        ages = closed + got["still_open"]
        res.attack_opened = int(got["opened"])
        res.attack_closed_by_server = len(closed)
        res.attack_lifetime_s_max = round(max(ages), 2) if ages else 0.0
        res.attack_lifetime_s_p50 = pct(ages, 0.5)
        res.scrape_ms_p50, res.scrape_ms_p99 = pct(lat, 0.5), pct(lat, 0.99)
        res.scrape_ms_max = round(max(lat), 2) if lat else 0.0
    finally:
        finish(agent, res, 8, max_rss_growth_mib)
    res.passed = res.passed and res.attack_lifetime_s_max <= request_timeout + 5.0
    return res


def per_connection_memory(conns: int = 1000, src: Path = ROOT / "src") -> dict[str, float]:
    """KiB of podgpu's RSS per connection held open for 4 s (deadline 60 s), by kind: plain idle
    (connected, nothing sent), TLS silent, TLS after one byte of a ClientHello (the handshake has
    started), and a plain pipelining client that never reads (400 GETs sent)."""
    out: dict[str, float] = {}
    for kind in ("plain-idle", "tls-silent", "tls-one-byte", "tls-partial-hello",
                 "plain-pipelining-non-reader", "plain-pipelining-identity"):
        tmp = Path(tempfile.mkdtemp(prefix="podgpu-mem-"))
        args = ["--simulate", "8xH100", "--http-request-timeout", "60"]
        if kind.startswith("tls"):
            args += ["--web-config-file", str(tls_config(tmp))]
        agent = Serve(args, src=src, tls=kind.startswith("tls"))
        port = agent.port
        socks: list[socket.socket] = []
        try:
            agent.wait_ready()
            time.sleep(1.0)
            before = rss_fds(agent.pid)[0]
            for _ in range(conns):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
                s.connect(("127.0.0.1", port))
                if kind == "tls-one-byte":
                    s.sendall(b"\x16")
                elif kind == "tls-partial-hello":
                    s.sendall(HELLO_START)
                elif kind == "plain-pipelining-non-reader":
                    s.sendall(GET * 400)
                elif kind == "plain-pipelining-identity":
                    s.sendall(GET_IDENTITY * 400)
                socks.append(s)
            time.sleep(4.0)
            out[kind] = round((rss_fds(agent.pid)[0] - before) * 1024 / conns, 1)
        finally:
            for s in socks:
                s.close()
            agent.stop()
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "memory":
        conns = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
        src = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / "src"
        print(json.dumps({"conns": conns, "src": str(src),
                          "kib_per_connection": per_connection_memory(conns, src)}))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--helper":
        attack, port, conns_arg, duration, pipelined, identity, sources = sys.argv[2:9]
        print(json.dumps(attacker(attack, int(port), int(conns_arg), float(duration),
                                  int(pipelined), identity == "1", int(sources))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("attack", choices=("tls-silent", "tls-hello", "pipeline"))
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--scrapers", type=int, default=20)
    ap.add_argument("--request-timeout", type=float, default=15.0)
    ap.add_argument("--pipelined", type=int, default=400)
    ap.add_argument("--max-rss-growth-mib", type=float, default=40.0)
    ap.add_argument("--identity", action="store_true",
                    help="pipeline: ask for the uncompressed answer (Accept-Encoding: identity)")
    ap.add_argument("--sources", type=int, default=1,
                    help="loopback source addresses the attacking connections come from")
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--src", type=Path, default=ROOT / "src",
                    help="the podgpu sources to run (e.g. a `git archive` of an older commit)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = run_attack(args.attack, conns=args.conns, duration=args.duration,
                     scrapers_n=args.scrapers, request_timeout=args.request_timeout,
                     pipelined=args.pipelined, max_rss_growth_mib=args.max_rss_growth_mib,
                     serve_args=tuple(args.serve_arg), src=args.src, identity=args.identity,
                     sources=args.sources)
    return report(res, args.out)


if __name__ == "__main__":
    sys.exit(main())
