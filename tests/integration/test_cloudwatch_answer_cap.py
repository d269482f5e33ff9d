"""What podgpu reads back from a CloudWatch Logs endpoint is capped: an endpoint (or a proxy on a
plain-HTTP path) answering PutLogEvents with an endless body cost +3.4 GiB in 11 s when the answer
was read whole. Now at most MAX_ANSWER_BYTES are read and the connection is closed unread.

The endpoint is tests/hostile_peers.py's `/huge` (an endless chunked answer); the checks are bytes
and counts: the stand-in served the call, the call ended with an error, memory stayed bounded."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from podgpu.sinks.cloudwatch.logsapi import MAX_ANSWER_BYTES, AnswerError, LogsApi
from tests.conftest import free_port
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
            while peers.hits.get("/huge", 0) < 1 and proc.poll() is None:
                time.sleep(0.1)
            base = rss(proc.pid)
            peak = base
            while peers.hits.get("/huge", 0) < 4 and proc.poll() is None:
                peak = max(peak, rss(proc.pid))
                time.sleep(0.05)
            peak = max(peak, rss(proc.pid))
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
    assert peak - base <= 64 << 20, (base, peak)
    assert "Traceback" not in err, err
