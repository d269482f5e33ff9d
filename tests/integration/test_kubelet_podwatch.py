"""The node-scoped pod watch (podgpu's own client, kubeapi.py) against a local API stand-in."""

from __future__ import annotations

import os
from collections.abc import Iterator
from unittest import mock

import pytest

from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.podwatch import PodWatcher
from tests.harness import wait_for
from tests.integration.kube_api_fake import FakeKubeApi, pod

CID = "c" * 64


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


def watcher(api: FakeKubeApi, node: str | None = "n1") -> PodWatcher:
    return PodWatcher(node, configuration=KubeConfig(host=api.url),
                      watch_timeout_seconds=5, max_backoff_seconds=0.2)


def test_lists_then_follows_adds_changes_and_deletes(api: FakeKubeApi) -> None:
    api.put(pod("u1", "ml", "train", labels={"app": "t"}, containers={"main": CID}))
    api.put(pod("u9", "other", "elsewhere", node="n2"))  # another node: never seen
    w = watcher(api)
    w.start()
    try:
        wait_for(lambda: set(w.index.by_uid) == {"u1"})
        assert w.index.by_name[("ml", "train")].container_name(CID) == "main"
        first = api.list_requests()[0]
        assert first["fieldSelector"] == ["spec.nodeName=n1"]

        api.put(pod("u2", "ml", "infer"))
        wait_for(lambda: "u2" in w.index.by_uid)
        assert w.index.by_uid["u2"].containers == ()
        api.put(pod("u2", "ml", "infer", containers={"srv": "d" * 64}))  # container started
        wait_for(lambda: w.index.by_uid["u2"].container_name("d" * 64) == "srv")
        api.delete("u1")
        wait_for(lambda: "u1" not in w.index.by_uid)
        assert ("ml", "train") not in w.index.by_name
        watches = [r for r in api.requests if r.get("watch") == ["true"]]
        assert watches and all(r["fieldSelector"] == ["spec.nodeName=n1"] for r in watches)
        assert watches[0]["resourceVersion"] == ["102"]  # from the list, not from scratch
        assert w.errors == 0 and w.available
    finally:
        w.close()


def test_expired_watch_relists(api: FakeKubeApi) -> None:
    api.put(pod("u1", "ml", "a"))
    w = watcher(api)
    w.start()
    try:
        wait_for(lambda: any(r.get("watch") == ["true"] for r in api.requests))
        api.pods.pop("u1")  # a change the watch never saw (compacted away) ...
        api.pods["u3"] = pod("u3", "ml", "c")
        api.expire()  # ... then 410 Gone: only a fresh list can know
        wait_for(lambda: set(w.index.by_uid) == {"u3"})
        assert len(api.list_requests()) == 2
        assert w.errors == 0  # an expired watch is routine, not an error
    finally:
        w.close()


def test_forbidden_counts_errors_says_why_and_recovers(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    api.fail_status = 403
    w = watcher(api)
    w.start(wait_seconds=0.3)
    try:
        wait_for(lambda: w.errors >= 2)
        assert w.index.by_uid == {}
        assert "get/list/watch on pods" in caplog.text
        assert caplog.text.count("pod list/watch failed") == 1  # the same failure: logged once
        api.fail_status = None
        api.put(pod("u1", "ml", "a"))
        wait_for(lambda: "u1" in w.index.by_uid)
    finally:
        w.close()


def test_without_node_name_no_api_call_and_one_line(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    w = watcher(api, node=None)
    w.start()
    w.close()
    assert not w.available and "NODE_NAME" in w.reason
    assert api.requests == []
    assert len([r for r in caplog.records if "no Kubernetes API access" in r.message]) == 1


def test_outside_a_cluster_no_api_and_one_line(caplog: pytest.LogCaptureFixture) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    with mock.patch.dict(os.environ, env, clear=True):
        w = PodWatcher("n1")  # in-cluster config: no service host, no token
        w.start()
        w.close()
    assert not w.available
    assert w.reason.startswith("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
    assert len([r for r in caplog.records if "pod UID only" in r.message]) == 1
