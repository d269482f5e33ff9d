"""Hostile HTTP peers on loopback for the clients podgpu runs: the bridge's
scrape targets, `podgpu top`'s nodes, the EMF sender's endpoint.

A real TCP server (a thread per connection) that reads the request head and then misbehaves as
the path says. These are fakes that inject faults (the project's rule: fakes only for faults); the
good paths serve real text. bench/hostile_clients.py uses the same server with bigger sizes.

Paths:
- `/good`: a small valid exposition (a gauge and a counter that counts scrapes);
- `/bomb?mib=N`: a gzip member of N MiB of zeros, with `Content-Encoding: gzip` (default 64);
- `/huge?mib=N`: N MiB of valid-looking text, chunked, no Content-Length (N=0: endless);
- `/series?n=N`: N distinct gauge samples;
- `/trickle`: the status line, then one byte a second, forever;
- `/redirect?to=URL`: a 302 to URL;
- `/auth`: 401 unless basic auth `user:pa55` is sent, then `/good`'s text;
- any path set with `set_body(path, bytes)`: that fixed answer (for `top`);
- any path in `aliases`: the path it names (for clients whose path is fixed: the pod list).

`top` appends `/api/v1/snapshot` to each URL; the server takes it off before choosing.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import threading
import time
import urllib.parse
import zlib
from collections.abc import Iterator

GOOD_TEXT = ("# HELP up_gauge A gauge.\n# TYPE up_gauge gauge\nup_gauge{gpu=\"0\"} 1\n"
             "# HELP scrapes_total Scrapes served.\n# TYPE scrapes_total counter\n")


def gzip_bomb(mib: int) -> bytes:
    """A gzip member of `mib` MiB of zeros (~1 KB per MiB), built in 1 MiB steps."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    out = [comp.compress(block) for _ in range(mib)]
    out.append(comp.flush())
    return b"".join(out)


class _Handler(socketserver.BaseRequestHandler):
    server: HostilePeers

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = sock.recv(4096)
                if not data:
                    return
                head += data
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) < 2:
            return
        url = urllib.parse.urlsplit(parts[1])
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path.removesuffix("/api/v1/snapshot")  # `top` appends it to every URL
        if path in self.server.aliases:  # a client whose path is fixed (the pod list)
            url = urllib.parse.urlsplit(self.server.aliases[path])
            query = dict(urllib.parse.parse_qsl(url.query))
            path = url.path
        srv = self.server
        with srv._count:
            srv.hits[path] = srv.hits.get(path, 0) + 1
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            with contextlib.suppress(OSError):
                self._answer(sock, path, query, head)
        finally:
            with srv._count:
                srv.in_flight -= 1

    def _send(self, sock: socket.socket, status: str, body: bytes, headers: str = "",
              ctype: str = "text/plain; version=0.0.4") -> None:
        sock.sendall(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                     f"\r\nConnection: close\r\n{headers}\r\n".encode() + body)

    def _answer(self, sock: socket.socket, path: str, query: dict[str, str], head: bytes) -> None:
        srv = self.server
        if path in srv.bodies:
            status, ctype, body = srv.bodies[path]
            self._send(sock, status, body, ctype=ctype)
        elif path == "/good":
            self._send(sock, "200 OK", srv.good_text().encode())
        elif path == "/bomb":
            mib = int(query.get("mib", "64"))
            if mib not in srv.bombs:
                srv.bombs[mib] = gzip_bomb(mib)
            self._send(sock, "200 OK", srv.bombs[mib], "Content-Encoding: gzip\r\n")
        elif path == "/huge":
            self._chunked(sock, int(query.get("mib", "0")))
        elif path == "/series":
            n = int(query.get("n", "100000"))
            if n not in srv.series:
                srv.series[n] = ("# TYPE many gauge\n" + "".join(
                    f'many{{i="{i}"}} {i}\n' for i in range(n))).encode()
            self._send(sock, "200 OK", srv.series[n])
        elif path == "/trickle":
            sock.sendall(b"HTTP/1.1 200 OK\r\n")
            while not srv.stopping.is_set():
                sock.sendall(b"X")
                srv.trickled += 1
                time.sleep(1.0)
        elif path == "/redirect":
            to = query.get("to", "ftp://127.0.0.1/")
            self._send(sock, "302 Found", b"", f"Location: {to}\r\n")
        elif path == "/auth":
            want = "Basic " + base64.b64encode(b"user:pa55").decode()
            if f"authorization: {want}".lower().encode() in head.lower():
                self._send(sock, "200 OK", srv.good_text().encode())
            else:
                self._send(sock, "401 Unauthorized", b"", 'WWW-Authenticate: Basic realm="x"\r\n')
        else:
            self._send(sock, "404 Not Found", b"")

    def _chunked(self, sock: socket.socket, mib: int) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        line = b'filler{gpu="0",pad="' + b"x" * 990 + b'"} 1\n'  # 1 KiB, one sample
        chunk = line * 64
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        sent = 0
        while (mib == 0 or sent < mib << 20) and not self.server.stopping.is_set():
            sock.sendall(frame)
            sent += len(chunk)
        sock.sendall(b"0\r\n\r\n")


class HostilePeers(socketserver.ThreadingTCPServer):
    """The server; `url(path)` names a target on it. Stop with `close()`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: dict[str, int] = {}
        self.bombs: dict[int, bytes] = {}
        self.series: dict[int, bytes] = {}
        self.bodies: dict[str, tuple[str, str, bytes]] = {}
        self.aliases: dict[str, str] = {}
        """path -> the path (and query) served for it, e.g. `/api/v1/pods` -> `/huge?mib=0`."""
        self.stopping = threading.Event()
        self.served = 0
        self.trickled = 0
        """Bytes sent by /trickle, over all its connections."""
        self.in_flight = 0
        self.max_in_flight = 0
        """The most requests this server was answering at once."""
        self._count = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str, userinfo: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}{path}"

    def good_text(self) -> str:
        self.served += 1
        return GOOD_TEXT + f"scrapes_total {self.served}\n"

    def set_body(self, path: str, body: bytes, status: str = "200 OK",
                 ctype: str = "application/json") -> None:
        self.bodies[path] = (status, ctype, body)

    def close(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


@contextlib.contextmanager
def hostile_peers() -> Iterator[HostilePeers]:
    srv = HostilePeers()
    try:
        yield srv
    finally:
        srv.close()
