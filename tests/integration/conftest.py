"""Fixtures shared by the kubelet tests: a short socket path and a real gRPC kubelet on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.kubelet_fake import FakeKubelet, socket_path


@pytest.fixture
def sock() -> Iterator[str]:
    with socket_path() as path:
        yield path


@pytest.fixture
def kubelet(sock: str) -> Iterator[FakeKubelet]:
    k = FakeKubelet(sock).start()
    yield k
    k.stop()
