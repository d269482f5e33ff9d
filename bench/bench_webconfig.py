"""What the web config costs a scrape: bcrypt per check, a cached basic-auth check, and a TLS
handshake through the rotating context (SNI-callback switch) versus a plain SSLContext.

    .venv/bin/python -m bench.bench_webconfig

Prints one JSON object. In-process, loopback, one core busy; certificates generated on the fly.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import bcrypt
from tests.tlsutil import Pki

from podgpu.http.auth import BasicAuthChecker
from podgpu.http.tls import TlsReloader, build_context
from podgpu.http.webconfig import TlsServerConfig


def bcrypt_ms(cost: int, n: int = 5) -> float:
    h = bcrypt.hashpw(b"pw", bcrypt.gensalt(cost))
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        bcrypt.checkpw(b"pw", h)
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e3


async def cached_check_us(n: int = 20000) -> float:
    checker = BasicAuthChecker()
    users = {"prometheus": bcrypt.hashpw(b"pw", bcrypt.gensalt(10)).decode()}
    assert await checker.check(users, b"prometheus", b"pw")
    t0 = time.perf_counter()
    for _ in range(n):
        await checker.check(users, b"prometheus", b"pw")
    checker.close()
    return (time.perf_counter() - t0) / n * 1e6


async def handshake_ms(server_ctx: ssl.SSLContext, ca: Path, n: int = 200) -> float:
    async def on_conn(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=str(ca))

    def connect_many() -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            with socket.create_connection(("127.0.0.1", port)) as raw, \
                    client.wrap_socket(raw, server_hostname="localhost"):
                out.append(time.perf_counter() - t0)
        return out

    times = await asyncio.get_running_loop().run_in_executor(None, connect_many)
    server.close()
    return statistics.median(times) * 1e3


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pki = Pki(Path(tmp), "bench")
        leaf = pki.leaf("server", server=True)
        cfg = TlsServerConfig(cert_file=str(leaf.cert), key_file=str(leaf.key))
        plain = build_context(cfg, "bench")
        rotating = TlsReloader(cfg, "bench").front
        result = {
            "bcrypt_check_ms": {c: round(bcrypt_ms(c), 2) for c in (4, 10, 12)},
            "cached_basic_auth_check_us": round(await cached_check_us(), 2),
            "tls13_handshake_ms_plain_context": round(await handshake_ms(plain, pki.ca), 3),
            "tls13_handshake_ms_rotating_context": round(await handshake_ms(rotating, pki.ca), 3),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
