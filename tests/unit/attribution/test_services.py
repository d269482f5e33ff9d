"""The Service index behind Container Insights' `Service`: which Service selects a pod (every
selector pair among the pod's labels; an empty selector selects nothing, as Kubernetes'
endpoints controller treats it), the first by name when several do, only in the pod's
namespace; watch events change it; a cap bounds it; and the watcher against the API stand-in
(list, watch, 410, 403)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.services import (
    MAX_SELECTOR_PAIRS,
    ServiceIndex,
    ServiceInfo,
    ServiceWatcher,
    parse_service,
)
from tests.harness import wait_for
from tests.integration.kube_api_fake import FakeKubeApi, service

TRAINER = (("app", "trainer"), ("tier", "gpu"))  # a pod's labels, sorted as PodInfo keeps them


def svc(ns: str, name: str, selector: dict[str, str] | None) -> dict[str, Any]:
    """A Service as the API serves it (literal JSON shape)."""
    spec: dict[str, Any] = {"clusterIP": "10.100.3.4", "ports": [{"port": 8080}]}
    if selector is not None:
        spec["selector"] = selector
    return {"kind": "Service", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7"}, "spec": spec}


def index_of(*objs: dict[str, Any], cap: int = 100) -> ServiceIndex:
    idx = ServiceIndex(cap)
    idx.replace(s for s in map(parse_service, objs) if s is not None)
    return idx


def test_a_selector_selects_when_all_its_pairs_are_among_the_pods_labels() -> None:
    idx = index_of(svc("ml", "web", {"app": "trainer"}))
    assert idx.first("ml", TRAINER) == "web"
    assert idx.first("ml", (("app", "trainer"),)) == "web"
    assert idx.first("ml", (("app", "other"),)) == ""
    both = index_of(svc("ml", "narrow", {"app": "trainer", "tier": "cpu"}))
    assert both.first("ml", TRAINER) == ""  # one pair differs: not selected
    assert both.first("ml", ()) == ""


def test_empty_or_absent_selectors_select_nothing_and_are_not_kept() -> None:
    idx = index_of(svc("ml", "a-headless", None), svc("ml", "b-empty", {}),
                   svc("ml", "c-real", {"app": "trainer"}))
    assert idx.first("ml", TRAINER) == "c-real"
    assert len(idx) == 1
    assert parse_service({"metadata": {"namespace": "ml"}}) is None  # no name


def test_the_first_service_is_the_first_by_name_in_the_pods_namespace() -> None:
    idx = index_of(svc("ml", "zeta", {"app": "trainer"}), svc("ml", "alpha", {"tier": "gpu"}),
                   svc("ml", "Beta", {"app": "trainer"}), svc("ml", "alpha-2", {"app": "x"}))
    assert idx.first("ml", TRAINER) == "Beta"  # ordinal order: upper case before lower case
    # another namespace's Services never select the pod, whatever their selector
    other = index_of(svc("inference", "aaa", {"app": "trainer"}))
    assert other.first("ml", TRAINER) == ""
    assert other.first("inference", TRAINER) == "aaa"


def test_modified_and_deleted_services_change_the_answer() -> None:
    idx = index_of(svc("ml", "a", {"app": "trainer"}), svc("ml", "b", {"app": "trainer"}))
    assert idx.first("ml", TRAINER) == "a"
    moved = parse_service(svc("ml", "a", {"app": "other"}))
    assert moved is not None and idx.put(moved)
    assert idx.first("ml", TRAINER) == "b"  # the memo is cleared by a change
    idx.delete("ml", "b")
    assert idx.first("ml", TRAINER) == ""
    emptied = parse_service(svc("ml", "a", None))  # a selector removed: dropped
    assert emptied is not None and idx.put(emptied)
    assert len(idx) == 0


def test_the_cap_bounds_the_services_kept() -> None:
    idx = index_of(*(svc("ns", f"s{i}", {"app": f"a{i}"}) for i in range(5)), cap=3)
    assert len(idx) == 3 and idx.refused == 2
    extra = parse_service(svc("ns", "late", {"app": "late"}))
    assert extra is not None and not idx.put(extra)  # full: not kept
    assert idx.first("ns", (("app", "late"),)) == ""
    kept = parse_service(svc("ns", "s0", {"app": "late"}))  # a kept one may still change
    assert kept is not None and idx.put(kept)
    assert idx.first("ns", (("app", "late"),)) == "s0"
    idx.delete("ns", "s1")
    assert extra is not None and idx.put(extra) and len(idx) == 3


def test_a_huge_selector_is_cut_to_its_first_pairs() -> None:
    s = parse_service(svc("ns", "big", {f"k{i:03}": "v" for i in range(500)}))
    assert s is not None and len(s.selector) == MAX_SELECTOR_PAIRS
    assert s == ServiceInfo("ns", "big", tuple((f"k{i:03}", "v") for i in range(64)))


@pytest.fixture
def api() -> Any:
    fake = FakeKubeApi().start()
    yield fake
    fake.stop()


def test_watcher_lists_then_follows_the_watch(api: FakeKubeApi) -> None:
    api.put_service(service("ml", "trainer", {"app": "trainer"}))
    api.put_service(service("ml", "headless"))
    for i in range(7):  # more than one page
        api.put_service(service("other", f"s{i}", {"app": "trainer"}))
    w = ServiceWatcher(configuration=KubeConfig(api.url), watch_timeout_seconds=5, list_page=3)
    try:
        w.start(wait_seconds=5)
        assert w.first("ml", TRAINER) == "trainer"
        assert len(w.index) == 8 and w.health()["status"] == "ok"
        assert sum(1 for r in api.list_requests() if r["path"] == ["/api/v1/services"]) == 3
        api.put_service(service("ml", "a-first", {"tier": "gpu"}))
        wait_for(lambda: w.first("ml", TRAINER) == "a-first", what="an ADDED Service")
        api.put_service(service("ml", "a-first", {"tier": "cpu"}))
        wait_for(lambda: w.first("ml", TRAINER) == "trainer", what="a MODIFIED Service")
        api.delete_service("ml", "trainer")
        wait_for(lambda: w.first("ml", TRAINER) == "", what="a DELETED Service")
        # the watch's version compacted away: a new list
        lists = len(api.list_requests())
        api.gone_below = api.rv + 1
        api.close_watches()
        wait_for(lambda: len(api.list_requests()) > lists, what="a list after 410")
    finally:
        w.close()


def test_watcher_without_rbac_logs_once_and_names_no_service(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    api.put_service(service("ml", "trainer", {"app": "trainer"}))
    api.fail_services = 403
    w = ServiceWatcher(configuration=KubeConfig(api.url), max_backoff_seconds=0.05)
    with caplog.at_level(logging.WARNING, logger="podgpu.attribution.services"):
        try:
            w.start(wait_seconds=5)
            wait_for(lambda: w.errors >= 3, what="three refused attempts")
            assert w.first("ml", TRAINER) == ""
            assert str(w.health()["status"]).startswith("failing: 403")
            refused = [r for r in caplog.records if "403" in r.getMessage()]
            assert len(refused) == 1 and "list/watch on services" in refused[0].getMessage()
            api.fail_services = None  # RBAC granted later: picked up without a restart
            wait_for(lambda: w.first("ml", TRAINER) == "trainer", what="Services once allowed")
        finally:
            w.close()


def test_rbac_taken_away_empties_the_index_another_failure_keeps_it(api: FakeKubeApi) -> None:
    api.put_service(service("ml", "trainer", {"app": "trainer"}))
    w = ServiceWatcher(configuration=KubeConfig(api.url), max_backoff_seconds=0.05)
    try:
        w.start(wait_seconds=5)
        wait_for(lambda: w.first("ml", TRAINER) == "trainer", what="the listed Service")
        api.fail_services = 500  # the API server failing: what the last list said stays
        api.close_watches()
        wait_for(lambda: w.errors >= 2, what="two failed attempts")
        assert w.first("ml", TRAINER) == "trainer"
        api.fail_services = 403  # the service account no longer allowed: nothing is known
        wait_for(lambda: w.first("ml", TRAINER) == "", what="the index emptied by a 403")
        assert str(w.health()["status"]).startswith("failing: 403")
    finally:
        w.close()


def test_watcher_without_an_api_stays_empty() -> None:
    w = ServiceWatcher(environ={})
    w.start(wait_seconds=5)
    assert w.first("ml", TRAINER) == ""
    assert str(w.health()["status"]).startswith("unavailable: KUBERNETES_SERVICE_HOST")
