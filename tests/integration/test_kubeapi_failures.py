"""Every caller of the Kubernetes API failing each way the API can fail it: a CA bundle that does
not load, a token file that cannot be read, a refused connection, an answer that is not JSON, an
error status, a 403. The pod watch, the Service watch and the Node lookup each say why in the
entry /health shows (`status`, `errors`), keep retrying, and no thread dies or logs a
traceback; the `-m` ConfigMap read (at start) names the reason in its error.

The API server is the stand-in (tests/integration/kube_api_fake.py); `answer_all` is the
injected fault for the answers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podgpu.attribution.configmap import read_configmap
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.nodeinfo import NodeLookup
from podgpu.attribution.podwatch import PodWatcher
from podgpu.attribution.services import ServiceWatcher
from podgpu.errors import AttributionError
from tests.harness import free_port, wait_for
from tests.integration.kube_api_fake import FakeKubeApi

pytestmark = pytest.mark.integration


PEERS: dict[str, tuple[Callable[[KubeConfig], Any], str]] = {
    # name: (the caller on that configuration, what its 403 says the service account needs)
    "pods": (lambda cfg: PodWatcher("n1", configuration=cfg, max_backoff_seconds=0.05),
             "get/list/watch on pods"),
    "services": (lambda cfg: ServiceWatcher(configuration=cfg, max_backoff_seconds=0.05),
                 "list/watch on services"),
    "node": (lambda cfg: NodeLookup("n1", configuration=cfg, refresh=0.05), "get on nodes"),
}


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


@pytest.fixture
def thread_deaths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What threads ended with an exception while the test ran."""
    deaths: list[str] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: deaths.append(f"{args.thread}: {args.exc_type}"))
    return deaths


def way(name: str, api: FakeKubeApi, tmp: Path, rbac: str) -> tuple[KubeConfig, str]:
    """(the configuration that fails this way, what the reason says)."""
    if name == "ca":
        bundle = tmp / "ca.crt"
        bundle.write_text("not a certificate\n")
        return KubeConfig("https://127.0.0.1:1", ca_file=str(bundle)), \
            f"CA bundle {bundle} cannot be loaded"
    if name == "token":
        return KubeConfig(api.url, token_file=str(tmp / "token")), \
            f"service-account token {tmp / 'token'}"
    if name == "connection":
        return KubeConfig(f"http://127.0.0.1:{free_port()}"), "ConnectionRefusedError"
    if name == "answer":
        api.answer_all = (200, b"<html>maintenance</html>")
        return KubeConfig(api.url), "JSONDecodeError"
    if name == "status":
        api.answer_all = (500, b'{"kind": "Status", "message": "etcdserver: timed out"}')
        return KubeConfig(api.url), "HTTP 500: etcdserver: timed out"
    api.answer_all = (403, b'{"kind": "Status", "message": "forbidden"}')
    return KubeConfig(api.url), f"403 Forbidden: the service account needs {rbac}"


@pytest.mark.parametrize("how", ["ca", "token", "connection", "answer", "status", "forbidden"])
@pytest.mark.parametrize("peer", sorted(PEERS))
def test_each_caller_says_why_in_health_and_keeps_retrying(
        api: FakeKubeApi, tmp_path: Path, thread_deaths: list[str],
        caplog: pytest.LogCaptureFixture, peer: str, how: str) -> None:
    make, rbac = PEERS[peer]
    cfg, why = way(how, api, tmp_path, rbac)
    caller = make(cfg)
    with caplog.at_level(logging.INFO, logger="podgpu"):
        try:
            caller.start(wait_seconds=5)
            wait_for(lambda: caller.errors >= 3, what="three failed calls")  # still retrying
            health = caller.health()
            assert str(health["status"]).startswith("failing: ") and why in health["status"], \
                health
            assert health["errors"] == caller.errors >= 3
        finally:
            caller.close()
    assert thread_deaths == []
    assert not any(r.exc_info for r in caplog.records), caplog.text
    said = [r.getMessage() for r in caplog.records if why in r.getMessage()]
    assert len(said) == 1, caplog.text  # said once, however often it failed


@pytest.mark.parametrize("how", ["ca", "token", "connection", "answer", "status", "forbidden"])
def test_the_configmap_read_names_the_reason(api: FakeKubeApi, tmp_path: Path,
                                             how: str) -> None:
    cfg, why = way(how, api, tmp_path, "get on configmaps in 'gpu'")
    with pytest.raises(AttributionError) as info:
        read_configmap("gpu", "metrics", configuration=cfg)
    assert why in str(info.value) and str(info.value).startswith("--configmap-data gpu:metrics")


def test_a_caller_that_works_again_says_so_and_shows_ok(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    api.nodes["n1"] = {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///z/i-0abc"}}
    api.answer_all = (500, b"{}")
    node = NodeLookup("n1", configuration=KubeConfig(api.url), refresh=0.05)
    with caplog.at_level(logging.INFO, logger="podgpu"):
        try:
            node.start(wait_seconds=5)
            wait_for(lambda: node.errors >= 1, what="a failed GET")
            api.answer_all = None
            wait_for(lambda: node.current().instance_id == "i-0abc", what="the Node read")
            wait_for(lambda: node.health()["status"] == "ok", what="ok in /health")
        finally:
            node.close()
    assert "works again" in caplog.text
