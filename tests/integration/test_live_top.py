"""`/api/v1/snapshot` and `podgpu top --once` against `podgpu serve --simulate` agents (in this process),
a dead node (closed port) and a hung one (a socket that accepts and never answers: the one
injected fault)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podgpu.sinks.live.page import pod_cells
from tests.conftest import free_port, wait_for
from tests.integration.live_support import POD_NAMES, XSS, top_pod_rows, write_scenario

pytestmark = pytest.mark.integration


def top(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", "top", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def hung() -> Iterator[str]:
    """host:port that completes the TCP handshake (kernel backlog) but never sends a byte."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


def test_snapshot_endpoint_is_escaped_json_of_the_live_view(agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = agent("--simulate", "4", "--simulate-scenario", write_scenario(tmp_path))
    p.wait_ready()
    status, headers, body = p.get("/api/v1/snapshot")
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert b"<script>" not in body and b"\\u003cscript\\u003e" in body
    doc = json.loads(body)
    assert doc["schema"] == "podgpu.snapshot/v1" and doc["node"] == "test-node"
    assert {pod["pod"] for pod in doc["pods"]} == POD_NAMES
    assert [d["gpu"] for d in doc["devices"]] == ["0", "1", "2", "3"]
    assert [d["sharing"] for d in doc["devices"]] == ["exclusive", "shared", "exclusive", "exclusive"]
    status, headers, page = p.get("/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page and XSS.encode() not in page
    status, headers, js = p.get("/static/uPlot.iife.min.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert js.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    for bad in ("/static/nope.js", "/static/..%2Fserver.py", "/static/%2e%2e/live.py"):
        assert p.get(bad)[0] == 404, bad


def test_top_once_shows_every_node_and_a_dead_and_a_hung_one(agent, tmp_path: Path, hung: str) -> None:  # type: ignore[no-untyped-def]
    a = agent("--simulate", "4", "--simulate-scenario", write_scenario(tmp_path),
              env={"NODE_NAME": "node-a"})
    b = agent("--simulate", "2xA100", "--simulate-scenario", "none", env={"NODE_NAME": "node-b"})
    a.wait_ready()
    b.wait_ready()
    dead = f"127.0.0.1:{free_port()}"
    before = json.loads(a.get("/api/v1/snapshot")[2])
    out = top("--once", "--timeout", "1", "--width", "200", a.url, b.url.removeprefix("http://"),
              dead, hung)
    after = json.loads(a.get("/api/v1/snapshot")[2])
    assert out.returncode == 1, out.stderr  # a dead node: exit 1, and the view is still printed
    lines = out.stdout.splitlines()
    assert any(line.startswith("node-a  simulated") for line in lines)
    assert any(line.startswith("node-b  simulated") for line in lines)
    assert any(line.startswith(f"{dead}  DEAD:") and "refused" in line for line in lines), out.stdout
    assert any(line.startswith(f"{hung}  DEAD:") and "no complete answer within" in line for line in lines), out.stdout
    # node-b has two A100s and no pods: GPU rows, no pod rows
    rows = top_pod_rows(out.stdout)
    assert {r[0] for r in rows} == {"node-a"}
    assert {r[2] for r in rows} == POD_NAMES
    assert [r[2] for r in rows if r[-1] == "IDLE"] == ["idle-0"]
    # each row is exactly what the page prints for the same snapshot (the one before or after)
    expected = [{tuple(["node-a", *pod_cells(pod)]) for pod in doc["pods"]} for doc in (before, after)]
    got = {tuple(r[:7]) for r in rows}
    assert got in expected
    # busiest first
    utils = [int(r[6].rstrip("%")) for r in rows]
    assert utils == sorted(utils, reverse=True)


def test_top_filters_and_sorts_on_the_command_line(agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = agent("--simulate", "4", "--simulate-scenario", write_scenario(tmp_path))
    a.wait_ready()
    out = top("--once", "--idle", a.url)
    assert out.returncode == 0
    assert [r[2] for r in top_pod_rows(out.stdout)] == ["idle-0"]
    out = top("--once", "--filter", "INFER", "--sort", "name", a.url)
    assert [r[2] for r in top_pod_rows(out.stdout)] == ["infer-a", "infer-b"]


@pytest.mark.parametrize(("args", "needle"), [
    (["ftp://x"], "top: URL 'ftp://x'"),
    (["--timeout", "0", "h"], "--timeout"),
])
def test_top_bad_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    out = top("--once", *args)
    assert out.returncode == 2
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_top_interactive_reads_keys_in_a_terminal(agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The full-screen view in a real pseudo-terminal: sort, idle-only, a typed filter, quit."""
    import fcntl
    import os
    import pty
    import re
    import select
    import struct
    import termios

    a = agent("--simulate", "4", "--simulate-scenario", write_scenario(tmp_path))
    a.wait_ready()
    pid, fd = pty.fork()
    if pid == 0:  # child: becomes `podgpu top` on the pty
        os.execv(sys.executable, [sys.executable, "-m", "podgpu", "top", a.url])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    screen = ""

    def shows(needle: str) -> None:
        def read_until_shown() -> bool:
            nonlocal screen
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                screen += re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", os.read(fd, 65536).decode(errors="replace"))
            return needle in screen
        try:
            wait_for(read_until_shown, timeout=15, what=repr(needle), interval=0)
        except AssertionError as e:
            raise AssertionError(f"{e}; last output: {screen[-800:]!r}") from None

    try:
        shows("PODS sorted by util (5)")
        screen = ""
        os.write(fd, b"s")
        shows("PODS sorted by memory (5)")
        os.write(fd, b"i")
        shows("PODS sorted by memory, idle only (1)")
        os.write(fd, b"c/tr")
        shows("filter: tr_")
        os.write(fd, b"\r")
        shows("PODS sorted by memory, filter 'tr' (1)")
        os.write(fd, b"q")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)


def test_top_cuts_off_a_node_that_trickles_its_answer() -> None:
    """Injected fault: headers at once, then one byte every 0.3 s, forever. urllib's timeout is
    per read, so only top's own deadline ends this."""
    import threading
    import time

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn.sendall(b" ")
            time.sleep(0.3)
        conn.close()

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        out = top("--once", "--timeout", "1", f"127.0.0.1:{srv.getsockname()[1]}", timeout=20)
    finally:
        stop.set()
        srv.close()
    assert out.returncode == 1
    assert "DEAD: no complete answer within 1 s" in out.stdout, out.stdout
