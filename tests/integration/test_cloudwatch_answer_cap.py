"""What podgpu reads back from a CloudWatch Logs endpoint is capped: an endpoint (or a proxy on a
plain-HTTP path) answering PutLogEvents with an endless body cost +3.4 GiB in 11 s when the answer
was read whole. Now at most MAX_ANSWER_BYTES are read and the connection is closed unread.

The endpoint is tests/hostile_peers.py's `/huge` (an endless chunked answer); the checks are bytes
and counts: the stand-in served the call, the call ended with an error, memory stayed bounded."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from podgpu.sinks.cloudwatch.logsapi import MAX_ANSWER_BYTES, AnswerError, LogsApi
from tests.conftest import free_port
from tests.harness import wait_for
from tests.hostile_peers import hostile_peers
from tests.integration.aws_fakes import aws_env, podgpu_env

__all__ = ["aws_env"]  # fixture

pytestmark = pytest.mark.integration
CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "cloudwatch" / "podgpu-declarations.json"


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


def test_an_endless_answer_is_cut_at_the_cap(aws_env: None) -> None:
    with hostile_peers() as peers:
        api = LogsApi(region="us-east-1", endpoint_url=peers.url("/huge?mib=0"), timeout=30)
        tracemalloc.start()
        try:
            with pytest.raises(AnswerError, match=f"over {MAX_ANSWER_BYTES // 1024} KiB"):
                api.call("DescribeLogGroups", {})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            api.close()
        assert peers.hits["/huge"] == 1
    assert peak < 4 * MAX_ANSWER_BYTES + (1 << 20)


class TrickledBody:
    """An endpoint whose answer's headers come at once and whose body one byte every 0.2 s,
    forever (each byte well within the read timeout): only the call's deadline ends it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/"
        self.stop = threading.Event()
        self.sent = 0
        self.closed_by_client = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)  # the request (small: one read holds it)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            try:
                while not self.stop.wait(0.2):
                    conn.sendall(b"1\r\n \r\n")
                    self.sent += 1
            except OSError:
                self.closed_by_client.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listener.close()


def test_a_trickled_answer_ends_at_the_calls_deadline(aws_env: None) -> None:
    peer = TrickledBody()
    api = LogsApi(region="us-east-1", endpoint_url=peer.url, timeout=1.0)
    try:
        with pytest.raises(AnswerError, match=r"^CloudWatch Logs answer not complete within the "
                                              r"call's deadline"):
            api.call("DescribeLogGroups", {})
        wait_for(peer.closed_by_client.is_set, what="the client closed the connection")
    finally:
        api.close()
        peer.close()
    assert peer.sent >= 1  # it was trickling when the deadline ended the call


def test_an_answer_under_the_cap_is_read(aws_env: None) -> None:
    """The cap does not cut real answers: an error answer of a few hundred bytes is decoded."""
    with hostile_peers() as peers:
        peers.set_body("/err", b'{"__type": "ThrottlingException", "message": "slow down"}',
                       "400 Bad Request", "application/x-amz-json-1.1")
        api = LogsApi(region="us-east-1", endpoint_url=peers.url("/err"), timeout=30)
        try:
            with pytest.raises(Exception, match="ThrottlingException"):
                api.call("DescribeLogGroups", {})
        finally:
            api.close()


def test_serve_against_an_endless_answer_stays_within_64_mib() -> None:
    """`podgpu serve` sending EMF to an endpoint that streams an endless answer: after several
    calls the stand-in served, RSS grew by at most 64 MiB (before: gigabytes per call)."""
    port = free_port()
    with hostile_peers() as peers:
        proc = subprocess.Popen(
            [sys.executable, "-m", "podgpu", "serve", "--simulate", "2", "-a",
             f"127.0.0.1:{port}", "-c", "200", "--cloudwatch-config", str(CONFIG),
             "--emf-endpoint-url", peers.url("/huge?mib=0"), "--aws-region", "us-east-1",
             "--cluster-name", "e2e", "--emf-interval", "1", "--emf-label",
             "Service=nvidia-dcgm-exporter", "--emf-namespace", "gpu-operator"],
            env=podgpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: peers.hits.get("/huge", 0) >= 1 or proc.poll() is not None,
                     timeout=60, what="the first call to the huge answer", interval=0.1)
            base = peak = rss(proc.pid)

            def sampled_until_four_calls() -> bool:
                nonlocal peak
                peak = max(peak, rss(proc.pid))  # RSS sampled while the calls come
                return peers.hits.get("/huge", 0) >= 4 or proc.poll() is not None

            wait_for(sampled_until_four_calls, timeout=120, what="four calls to the huge answer",
                     interval=0.05)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
    assert peak - base <= 64 << 20, (base, peak)
    assert "Traceback" not in err, err
