"""AWS stand-ins for the EMF tests: a real CloudWatch Logs emulator and a fault proxy.

* `moto_url`: moto in server mode (`python -m moto.server`, started by `moto_server`), a separate
  process on loopback with a free port; podgpu reaches it with boto3 over real HTTP. Each test uses its own log stream, so one
  server serves a whole module.
* `podgpu_env()`: the environment for a podgpu subprocess, with dummy credentials and every other
  AWS_* variable removed, so a developer's real credentials or profile are never used and the test
  process's own environment is never changed. Tests that run the sink in-process use the
  `aws_env` fixture, which sets the same dummy values with monkeypatch for that test only.
* `read_events()` / `read_group()`: every event of a stream or a whole group, paginated.
* `FaultProxy`: see its docstring; it is a fake, used only to inject faults.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port as free_port  # re-exported for the AWS tests
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
PUT = "Logs_20140328.PutLogEvents"
"""X-Amz-Target of PutLogEvents (the AWS JSON protocol names the operation in this header)."""


def podgpu_env(**extra: str) -> dict[str, str]:
    """A podgpu subprocess's environment: dummy credentials, no other AWS_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, **CREDS, "PYTHONPATH": str(ROOT / "src"), **extra}


@contextmanager
def moto_server(**env: str) -> Iterator[str]:
    """moto in server mode on a free loopback port, `env` added to its environment; its URL once
    it listens, and it is stopped afterwards."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=podgpu_env(**env))

    def listening() -> bool:
        assert proc.poll() is None, f"moto exited {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            return False

    try:
        wait_for(listening, timeout=30, what="moto's port", interval=0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials for a sink driven in this process, for one test only."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in CREDS.items():
        monkeypatch.setenv(k, v)


def logs_client(url: str) -> Any:
    import boto3

    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1").client("logs", endpoint_url=url)


def read_events(url: str, group: str, stream: str) -> list[dict[str, Any]]:
    """Every event of one stream, oldest first (get_log_events, following the forward token
    until it stops changing, which is how the API says the end is reached)."""
    client = logs_client(url)
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream,
                              "startFromHead": True}
    while True:
        resp = client.get_log_events(**kwargs)
        out.extend(resp["events"])
        token = resp.get("nextForwardToken")
        if not resp["events"] or token == kwargs.get("nextToken"):
            return out
        kwargs["nextToken"] = token


def read_group(url: str, group: str) -> list[dict[str, Any]]:
    """Every event of every stream of a group (filter_log_events, paginated)."""
    out: list[dict[str, Any]] = []
    for page in logs_client(url).get_paginator("filter_log_events").paginate(logGroupName=group):
        out.extend(page["events"])
    return out


class FaultProxy:
    """A FAKE: a small threaded HTTP server between podgpu and moto that injects faults CloudWatch
    will not produce on demand. `mode` may be switched at any time:

    * ``pass``: forward to moto and relay its answer;
    * ``throttle``: HTTP 400 ``ThrottlingException`` ("Rate exceeded"), shaped as the AWS JSON
      protocol answers (``x-amzn-ErrorType`` header, ``application/x-amz-json-1.1`` body with
      ``__type`` and ``message``);
    * ``denied``: HTTP 400 ``AccessDeniedException``, the answer to a missing IAM permission;
    * ``500``: HTTP 500 ``InternalFailure``;
    * ``slow``: wait `slow_seconds`, then forward;
    * ``close``: read the request and close the connection without answering;
    * ``trickle``: for one request (the mode then goes back to ``pass``), the status line and
      then one header byte a second until the proxy closes; `trickling` counts those still open.

    Every request is counted by (mode, X-Amz-Target); `handling` counts the requests whose
    answer (or forward) is not finished yet.
    """

    MODES = ("pass", "throttle", "denied", "500", "slow", "close", "trickle")

    def __init__(self, upstream: str, slow_seconds: float = 0.3) -> None:
        self._mode = "pass"
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self.slow_seconds = slow_seconds
        self.trickling = 0
        self.handling = 0
        self._closing = threading.Event()
        host, port = upstream.removeprefix("http://").split(":")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(host, int(port)))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="fault-proxy",
                         daemon=True).start()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        assert mode in self.MODES, mode
        self._mode = mode

    def count(self, target: str = PUT, mode: str | None = None) -> int:
        """Requests seen for `target`, in one mode or in all."""
        with self._lock:
            return sum(n for (m, t), n in self._counts.items()
                       if t == target and (mode is None or m == mode))

    def _seen(self, target: str) -> str:
        with self._lock:
            mode = self._mode
            self._counts[(mode, target)] += 1
            if mode == "trickle":
                self._mode = "pass"
                self.trickling += 1
        return mode

    def _trickle(self, wfile: Any) -> None:
        try:
            wfile.write(b"HTTP/1.1 200 OK\r\n")
            while not self._closing.wait(1.0):
                wfile.write(b"X")
                wfile.flush()
        except OSError:
            pass  # the client gave up on this connection
        finally:
            with self._lock:
                self.trickling -= 1

    def _handler(self, host: str, port: int) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                with proxy._lock:
                    proxy.handling += 1
                try:
                    self._answer()
                finally:
                    with proxy._lock:
                        proxy.handling -= 1

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                mode = proxy._seen(self.headers.get("X-Amz-Target", ""))
                if mode == "throttle":
                    self._error(400, "ThrottlingException", "Rate exceeded")
                elif mode == "denied":
                    self._error(400, "AccessDeniedException",
                                "User: arn:aws:sts::123456789012:assumed-role/node/i-0 is not "
                                "authorized to perform: logs:PutLogEvents")
                elif mode == "500":
                    self._error(500, "InternalFailure", "The request processing has failed")
                elif mode == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif mode == "trickle":
                    self.close_connection = True
                    proxy._trickle(self.wfile)
                else:
                    if mode == "slow":
                        time.sleep(proxy.slow_seconds)
                    self._forward(body)

            def _forward(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(host, port, timeout=10)
                try:
                    conn.request("POST", self.path, body, dict(self.headers))
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                try:
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("content-length", "transfer-encoding",
                                             "connection", "date", "server"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client timed out and left: its answer is lost
                    self.close_connection = True

            def _error(self, status: int, code: str, message: str) -> None:
                data = json.dumps({"__type": code, "message": message}).encode()
                self.send_response(status)
                self.send_header("x-amzn-ErrorType", code)
                self.send_header("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000")
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(moto_url: str) -> Iterator[FaultProxy]:
    p = FaultProxy(moto_url)
    yield p
    p.close()
