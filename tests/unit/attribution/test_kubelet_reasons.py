"""The kubelet client's failure reasons (/health, the log) from grpclib's and the OS's errors
(issue 20: grpclib raises these where grpcio raised RpcError with a code and details). The stand-in
tests cover the ones a real server produces; these cover the rest with literal exceptions."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from podgpu.attribution.kubelet import _describe

SOCK = "/var/lib/kubelet/pod-resources/kubelet.sock"


@pytest.mark.parametrize(("exc", "reason"), [
    (GRPCError(Status.RESOURCE_EXHAUSTED, "rate limited\nsecond line"),
     "List failed: RESOURCE_EXHAUSTED: rate limited"),
    (GRPCError(Status.UNIMPLEMENTED, None), "List failed: UNIMPLEMENTED: "),
    (TimeoutError("Deadline exceeded"), "List failed: DEADLINE_EXCEEDED: Deadline exceeded"),
    (FileNotFoundError(2, "No such file or directory"),
     f"kubelet socket {SOCK}: no such file (is the kubelet running, is the path mounted?)"),
    (ConnectionRefusedError(111, "Connection refused"), f"kubelet socket {SOCK}: connection refused"),
    (PermissionError(13, "Permission denied"), f"kubelet socket {SOCK}: permission denied"),
    (OSError(104, "Connection reset by peer"), f"kubelet socket {SOCK}: Connection reset by peer"),
    (StreamTerminatedError("Connection lost"), "List failed: UNAVAILABLE: Connection lost"),
])
def test_reason(exc: Exception, reason: str) -> None:
    got = _describe(exc, SOCK)
    assert got == reason or (reason.endswith("permission denied") and got.startswith(reason))  # + the fix
