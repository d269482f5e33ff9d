"""podgpu's own listener (http.server.serve_until_stopped) on a loopback port, and a small
client that sends one GET per connection and reads the whole answer: the bytes on the wire are
the listener's, nothing is mocked."""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import Message

from podgpu.http.app import App
from podgpu.http.guard import ConnectionGuard, Limits
from podgpu.http.server import serve_until_stopped


@dataclass
class Answer:
    status: int
    headers: Message
    body: bytes

    async def text(self) -> str:
        return self.body.decode()


class Client:
    def __init__(self, port: int) -> None:
        self.port = port

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write((head + "\r\n").encode())
        data = await reader.read()
        writer.close()
        return parse(data)


def parse(data: bytes) -> Answer:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, _, fields = head.partition(b"\r\n")
    return Answer(int(status_line.split()[1]), email.parser.BytesHeaderParser().parsebytes(fields),
                  body)


@contextlib.asynccontextmanager
async def serving(app: App, *, ssl_context: ssl.SSLContext | None = None,
                  limits: Limits | None = None) -> AsyncIterator[tuple[int, ConnectionGuard]]:
    """(port, guard) while `app` serves on 127.0.0.1."""
    bound: asyncio.Future[tuple[int, ConnectionGuard]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_until_stopped(
        app, "127.0.0.1", 0, ssl_context=ssl_context, limits=limits,
        ready=lambda addrs, guard: bound.set_result((addrs[0][1], guard))))
    try:
        yield await asyncio.wait_for(asyncio.shield(bound), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
