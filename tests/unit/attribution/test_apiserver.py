"""ApiCaller, each API caller's state for /health: failures counted and worded (a 401 and a 403
say what to fix), logged once per distinct reason up to MAX_LOGGED_REASONS, `ok` again after a
success (said once); no API at all is `unavailable`, not a failure."""

from __future__ import annotations

import logging

import pytest

from podgpu.attribution.apiserver import MAX_LOGGED_REASONS, ApiCaller, connect
from podgpu.attribution.kubeapi import ApiAccessError, KubeApiError, KubeConfig, NotInCluster


def caller() -> ApiCaller:
    return ApiCaller("pod list/watch", rbac="get/list/watch on pods", without="no pod names",
                     environ={})


def test_failures_are_counted_worded_and_logged_once_per_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    c = caller()
    with caplog.at_level(logging.INFO, logger="podgpu.attribution.apiserver"):
        for _ in range(3):
            c.failed(KubeApiError(403, "Forbidden", "pods is forbidden"))
        assert c.health() == {"errors": 3, "status": "failing: 403 Forbidden: the service "
                                                     "account needs get/list/watch on pods"}
        c.failed(KubeApiError(401, "Unauthorized"))
        assert c.reason == "401 Unauthorized: the service-account token was refused"
        for i in range(2 * MAX_LOGGED_REASONS):
            c.failed(ConnectionRefusedError(f"refused {i}"))
        assert c.errors == 4 + 2 * MAX_LOGGED_REASONS
        assert c.reason == f"ConnectionRefusedError: refused {2 * MAX_LOGGED_REASONS - 1}"
        assert len([r for r in caplog.records if "failed (" in r.getMessage()]) == \
            MAX_LOGGED_REASONS
        c.succeeded()
        c.succeeded()
    assert c.health() == {"errors": 4 + 2 * MAX_LOGGED_REASONS, "status": "ok"}
    assert c.reason == ""
    assert [r.getMessage() for r in caplog.records].count("pod list/watch works again") == 1


def test_no_api_is_unavailable_not_a_failure() -> None:
    c = caller()
    assert c.connect() is None
    assert not c.available and c.errors == 0
    assert str(c.health()["status"]).startswith("unavailable: KUBERNETES_SERVICE_HOST")


def test_connect_raises_only_its_two_errors() -> None:
    with pytest.raises(NotInCluster):
        connect(None, {})
    with pytest.raises(ApiAccessError, match="API address 'https://h:port'"):
        connect(KubeConfig("https://h:port"))
    with pytest.raises(ApiAccessError, match="expected http"):
        connect(KubeConfig("ftp://h"))
    with pytest.raises(ApiAccessError, match=r"CA bundle /nonexistent/ca\.crt cannot be loaded"):
        connect(KubeConfig("https://h", ca_file="/nonexistent/ca.crt"))
