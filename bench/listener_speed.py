"""The scrape path's speed, plain and TLS, for several podgpu trees in alternating rounds.

Each round starts `podgpu serve --simulate 8` once per tree (a `src/` directory each; the order
rotates between rounds) and measures 8 keep-alive clients (bench_core's raw-socket client, over
TLS with `--tls`: a web config with a server certificate, handshakes before the clock starts),
no gzip: scrapes/s, p50/p99 latency, and the server's CPU per scrape (schedstat).

    git archive REV src | tar -x -C /tmp/REV
    .venv/bin/python -m bench.listener_speed --tree before=/tmp/REV/src --tree after=src \\
        --rounds 4 --scrapes 8000 [--tls] --out bench/results/NAME.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_core import HOST, HttpClient, concurrent, cpu_sched_seconds, memory
from tests.harness import free_port
from tests.tlsutil import Pki


class TlsClient(HttpClient):
    """bench_core's client over TLS (certificate checked against the test CA)."""

    context: ssl.SSLContext

    def get(self) -> tuple[int, bytes]:
        if self.sock is None:
            raw = socket.create_connection((HOST, self.port), timeout=10)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = self.context.wrap_socket(raw, server_hostname=HOST)
            self.connects += 1
        return super().get()


def serve(src: str, port: int, web_config: Path | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "podgpu", "serve", "--simulate", "8", "-c", "1000",
           "-a", f"{HOST}:{port}"]
    if web_config is not None:
        cmd += ["--web-config-file", str(web_config)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_ready(port: int, tls: bool) -> None:
    for _ in range(300):
        client = TlsClient(port) if tls else HttpClient(port)
        try:
            if client.get()[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
        finally:
            client.close()
    raise RuntimeError("podgpu did not answer /metrics")


def measure(src: str, scrapes: int, web_config: Path | None) -> dict[str, Any]:
    port = free_port()
    proc = serve(src, port, web_config)
    try:
        wait_ready(port, web_config is not None)
        cpu0 = cpu_sched_seconds(proc.pid)
        summary, connects = concurrent(port, scrapes, 8,
                                       TlsClient if web_config is not None else HttpClient)
        if connects != 8:  # each client's handshake happened once, before the clock
            raise RuntimeError(f"{connects} connections for 8 clients, not one each")
        cpu = cpu_sched_seconds(proc.pid) - cpu0
        return {**summary,
                "server_cpu_ms_per_scrape": cpu / summary["scrapes"] * 1e3,
                "rss_mb": memory(proc.pid)["rss_mb"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=SRC_DIR")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scrapes", type=int, default=8000, help="per tree and round")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    trees = [tuple(t.split("=", 1)) for t in a.tree]
    with tempfile.TemporaryDirectory() as tmp:
        web_config = None
        if a.tls:
            pki = Pki(Path(tmp), "bench")
            leaf = pki.leaf("server", server=True)
            web_config = Path(tmp) / "web.yml"
            web_config.write_text(f"tls_server_config:\n  cert_file: {leaf.cert}\n"
                                  f"  key_file: {leaf.key}\n")
            TlsClient.context = ssl.create_default_context(cafile=str(pki.ca))
        rounds: list[dict[str, Any]] = []
        for r in range(a.rounds):
            order = trees[r % len(trees):] + trees[:r % len(trees)]
            got = {name: measure(src, a.scrapes, web_config) for name, src in order}
            rounds.append(got)
            print(f"round {r + 1}: " + "; ".join(
                f"{n} {g['scrapes_per_s']:.0f}/s p99 {g['p99_ms']:.2f} ms "
                f"cpu {g['server_cpu_ms_per_scrape']:.3f} ms" for n, g in got.items()),
                flush=True)
    a.out.write_text(json.dumps({"argv": sys.argv, "tls": a.tls, "trees": dict(trees),
                                 "loadavg_end": os.getloadavg(), "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
