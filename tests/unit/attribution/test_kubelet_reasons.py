"""The kubelet client's failure reasons (/health, the log) from the gRPC call's and the OS's
errors. The stand-in tests cover the ones a real server produces; these cover the rest with
literal exceptions."""

from __future__ import annotations

import pytest

from podgpu.attribution.grpcunary import GrpcError, status_name
from podgpu.attribution.kubelet import _describe

SOCK = "/var/lib/kubelet/pod-resources/kubelet.sock"


@pytest.mark.parametrize(("exc", "reason"), [
    (GrpcError("RESOURCE_EXHAUSTED", "rate limited\nsecond line"),
     "List failed: RESOURCE_EXHAUSTED: rate limited"),
    (GrpcError("UNIMPLEMENTED", ""), "List failed: UNIMPLEMENTED: "),
    (GrpcError("DEADLINE_EXCEEDED", "Deadline exceeded"),
     "List failed: DEADLINE_EXCEEDED: Deadline exceeded"),
    (FileNotFoundError(2, "No such file or directory"),
     f"kubelet socket {SOCK}: no such file (is the kubelet running, is the path mounted?)"),
    (ConnectionRefusedError(111, "Connection refused"), f"kubelet socket {SOCK}: connection refused"),
    (PermissionError(13, "Permission denied"), f"kubelet socket {SOCK}: permission denied"),
    (OSError(104, "Connection reset by peer"), f"kubelet socket {SOCK}: Connection reset by peer"),
    (GrpcError("UNAVAILABLE", "the connection closed before the answer ended"),
     "List failed: UNAVAILABLE: the connection closed before the answer ended"),
])
def test_reason(exc: Exception, reason: str) -> None:
    got = _describe(exc, SOCK)
    assert got == reason or (reason.endswith("permission denied") and got.startswith(reason))  # + the fix


def test_status_names_follow_the_grpc_codes() -> None:
    """grpc/doc/statuscodes.md: 4 DEADLINE_EXCEEDED, 8 RESOURCE_EXHAUSTED, 14 UNAVAILABLE."""
    assert [status_name(c) for c in ("0", "4", "8", "14", "16", "99", "x")] == [
        "OK", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNAUTHENTICATED",
        "status 99", "status x"]
