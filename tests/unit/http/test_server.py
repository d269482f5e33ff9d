from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import warnings

import pytest

from podgpu.http.app import App, Request, Response
from podgpu.http.lifecycle import Stopper
from podgpu.http.server import accepts_gzip, serve_until_stopped
from tests.harness import free_port


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("", False),
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("deflate", False),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("GZIP;Q=0.5", True),
        ("*", True),
        ("*;q=0", False),
        ("identity, *;q=0.1", True),
        ("gzip;q=0, *;q=1", False),
        ("x-gzip", True),
        ("gzip;q=bogus", False),
    ],
)
def test_accept_encoding_q_values(header: str, expected: bool) -> None:
    assert accepts_gzip(header) is expected


def _read_to_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_client_that_connects_before_accepting_waits_in_the_backlog_and_is_answered() -> None:
    """serve's first cycle runs as `before_accept`: the port listens already, so a scrape that
    comes sooner is queued by the kernel (not refused) and answered once it returns, never
    before. The client connects from inside `before_accept`: a refusal would fail the test."""
    port = free_port()
    order: list[str] = []
    clients: list[socket.socket] = []
    queued = threading.Event()
    app = App()

    def health(_request: Request) -> Response:
        order.append("answered")
        return Response.text(200, "ok\n")

    app.add_get("/health", health)

    def before_accept() -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        clients.append(sock)
        queued.set()
        order.append("accepting")

    stopper = Stopper()
    server = threading.Thread(target=stopper.run, args=(serve_until_stopped(
        app, "127.0.0.1", port, before_accept=before_accept),))
    server.start()
    try:
        assert queued.wait(10)
        with clients[0] as sock:
            answer = _read_to_close(sock)
    finally:
        stopper.stop("test done")
        server.join(10)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nok\n")
    assert order == ["accepting", "answered"]


def test_what_before_accept_raises_is_raised_and_the_port_is_closed() -> None:
    port = free_port()
    seen: list[int] = []

    def before_accept() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            seen.append(port)  # it was listening
        raise RuntimeError("the first cycle failed")

    with pytest.raises(RuntimeError, match="the first cycle failed"):
        asyncio.run(serve_until_stopped(App(), "127.0.0.1", port, before_accept=before_accept))
    assert seen == [port]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def test_a_stop_asked_for_before_accepting_closes_the_port_and_answers_no_one() -> None:
    """`agent.stop` while the first cycle runs (a dying collect loop, a test's stop): the stop is
    taken at the first await after `before_accept`, and the port it listened on is closed."""
    port = free_port()
    stopper = Stopper()
    app = App()
    answered: list[str] = []

    def health(_request: Request) -> Response:
        answered.append("health")
        return Response.text(200, "ok\n")

    app.add_get("/health", health)
    clients: list[socket.socket] = []

    def before_accept() -> None:
        clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        clients[0].sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        stopper.stop("stopped while starting")

    leaked: list[BaseException | None] = []
    hook = sys.unraisablehook
    with warnings.catch_warnings():  # a socket left to the garbage collector warns as it goes
        warnings.simplefilter("error", ResourceWarning)
        sys.unraisablehook = lambda unraisable: leaked.append(unraisable.exc_value)
        try:
            stopper.run(serve_until_stopped(app, "127.0.0.1", port, before_accept=before_accept))
            gc.collect()
        finally:
            sys.unraisablehook = hook
    assert leaked == []  # closed, not dropped
    assert stopper.reason == "stopped while starting"
    with clients[0] as sock:
        try:
            unanswered = _read_to_close(sock)
        except ConnectionResetError:  # the kernel resets what the closed listener never took
            unanswered = b""
    assert unanswered == b""
    assert answered == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def test_every_interface_is_bound_as_asyncio_binds_it_without_its_executor_thread() -> None:
    """`--address :PORT` (host None): the same sockets as asyncio's create_server(None, ...)
    makes, but no executor thread is started for getaddrinfo (one more thread, kept for good)."""

    async def bound_by_asyncio() -> list[tuple[int, str]]:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, None, 0)
        try:
            return sorted((s.family, s.getsockname()[0]) for s in server.sockets)
        finally:
            server.close()

    async def bound_by_podgpu() -> tuple[list[tuple[int, str]], list[str]]:
        got: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(serve_until_stopped(
            App(), None, free_port(), ready=lambda addrs, _guard: got.set_result(addrs)))
        addresses = await got
        threads = [t.name for t in threading.enumerate()]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sorted((socket.AF_INET6 if ":" in host else socket.AF_INET, host)
                      for host, _ in addresses), threads

    ours, threads = asyncio.run(bound_by_podgpu())
    assert ours == asyncio.run(bound_by_asyncio())
    assert not [name for name in threads if name.startswith("asyncio")]
