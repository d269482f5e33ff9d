"""The pod list and watch against hostile API servers: every answer capped in bytes, pods per
node capped, a watch that never ends cut by its deadline, and pod events applied in a number of
steps that does not grow with the number of pods.

Stand-ins: tests/hostile_peers.py (an endless chunked body served as the pod list) and the API
server stand-in tests/integration/kube_api_fake.py (pages, huge events). The checks are bytes and
counts: the call ended, its allocations stayed under the cap, the pods kept."""

from __future__ import annotations

import gc
import logging
import sys
import tracemalloc
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from podgpu.attribution.kubeapi import MAX_LINE_BYTES, Connection, KubeConfig
from podgpu.attribution.podstore import MAX_PODS, PodInfo, PodStore
from podgpu.attribution.podwatch import PODS_PATH, PodWatcher
from podgpu.attribution.reflector import LIST_PAGE as LIST_PAGE_PODS
from podgpu.attribution.reflector import MAX_LIST_PAGE_BYTES
from podgpu.peers.capped import OverCap
from tests.harness import wait_for
from tests.hostile_peers import hostile_peers
from tests.integration.kube_api_fake import FakeKubeApi, pod

pytestmark = pytest.mark.integration


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


def test_an_endless_pod_list_ends_at_the_page_cap() -> None:
    """A list body that never ends cost +3.1 GiB in 4.8 s; now one page's cap, then an error."""
    with hostile_peers() as peers:
        peers.aliases[PODS_PATH] = "/huge?mib=0"
        conn = Connection(KubeConfig(peers.url("")))
        tracemalloc.start()
        try:
            with pytest.raises(OverCap, match=f"over the {MAX_LIST_PAGE_BYTES}-byte"):
                conn.get_json(PODS_PATH, {"limit": "100"}, timeout=60,
                              max_bytes=MAX_LIST_PAGE_BYTES)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            conn.close()
        assert peers.hits["/huge"] == 1
    assert peak < 3 * MAX_LIST_PAGE_BYTES


def test_a_trickled_answer_ends_at_the_call_deadline() -> None:
    """One byte a second keeps every read under its timeout; the call's deadline still ends it."""
    with hostile_peers() as peers:
        peers.aliases[PODS_PATH] = "/trickle"
        conn = Connection(KubeConfig(peers.url("")))
        try:
            with pytest.raises(TimeoutError, match="no complete answer within 2 s"):
                conn.get_json(PODS_PATH, timeout=2)
        finally:
            conn.close()


def test_pods_per_node_are_capped_and_listed_in_pages(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    """A field selector the server ignores (here: 1,300 pods on one node) keeps MAX_PODS pods,
    asked for in pages of LIST_PAGE_PODS, with one log line."""
    for i in range(MAX_PODS + 276):
        api.put(pod(f"u{i:05d}", "ml", f"p{i}"))
    w = PodWatcher("n1", configuration=KubeConfig(api.url), max_backoff_seconds=0.2)
    with caplog.at_level(logging.WARNING, logger="podgpu.attribution.podwatch"):
        w.start(wait_seconds=30)
        try:
            assert w.wait_synced(30)
            assert len(w.index.by_uid) == MAX_PODS
            pages = [r for r in api.list_requests() if "watch" not in r]
            assert all(r.get("limit") == [str(LIST_PAGE_PODS)] for r in pages)
            assert len(pages) == -(-MAX_PODS // LIST_PAGE_PODS) + (MAX_PODS % LIST_PAGE_PODS == 0)
            api.put(pod("late", "ml", "late"))  # one more through the watch: not kept either
            wait_for(lambda: w.resource_version == str(api.rv), timeout=15)
            assert "late" not in w.index.by_uid and len(w.index.by_uid) == MAX_PODS
        finally:
            w.close()
    lines = [r for r in caplog.records if "are kept" in r.getMessage()]
    assert len(lines) == 1 and f"more than {MAX_PODS} pods" in lines[0].getMessage()


def test_a_watch_event_over_the_cap_is_refused_not_held(api: FakeKubeApi) -> None:
    """A 3 MiB event (no object etcd stores is over 1.5 MiB) fails the watch, counted; the
    list that follows is a page under its own cap and is kept."""
    api.put(pod("u1", "ml", "a"))
    w = PodWatcher("n1", configuration=KubeConfig(api.url), max_backoff_seconds=0.2)
    w.start(wait_seconds=10)
    try:
        assert w.wait_synced(10)
        api.put(pod("big", "ml", "big", labels={"pad": "x" * (3 << 20)}))
        wait_for(lambda: w.errors >= 1, timeout=15)
        assert f"a watch event over {MAX_LINE_BYTES} bytes" in w.reason
        wait_for(lambda: "big" in w.index.by_uid, timeout=15)  # re-listed: a page may hold it
    finally:
        w.close()


def info(i: int, name: str | None = None, created: str = "") -> PodInfo:
    return PodInfo(uid=f"u{i}", namespace="ns", name=name or f"p{i}", created=created)


def calls_of(fn: Any) -> int:
    """How many Python and C function calls `fn()` makes (deterministic, unlike time)."""
    count = 0

    def prof(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    # no garbage collection inside: a collector callback (hypothesis registers one in a worker
    # that ran a property test first) would add its calls to the count
    gc.disable()
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return count


@pytest.mark.parametrize("kind", ["add", "update", "delete", "rename"])
def test_one_event_costs_the_same_whatever_the_number_of_pods(kind: str) -> None:
    """Each ADDED event re-sorted every pod (9,000 pods: 45 s with the GIL held)."""
    def cost(n: int) -> int:
        store = PodStore()
        store.replace(info(i) for i in range(n))
        store.index()
        event = {"add": lambda: store.put(info(n)),
                 "update": lambda: store.put(info(1, created="x")),
                 "delete": lambda: store.delete("u1"),
                 "rename": lambda: store.put(info(1, name="other"))}[kind]
        return calls_of(event)

    assert cost(10) == cost(1000)


def test_the_index_follows_events_and_the_newer_pod_holds_a_shared_name() -> None:
    store = PodStore()
    old, new = info(1, "web", "2026-01-01T00:00:00Z"), info(2, "web", "2026-01-02T00:00:00Z")
    store.put(new)
    store.put(old)
    first = store.index()
    assert first.by_name[("ns", "web")] is new and store.index() is first  # no change, no copy
    store.delete("u2")
    assert store.index().by_name[("ns", "web")] is old and "u2" not in store.index().by_uid
    store.put(info(1, "renamed", old.created))
    assert ("ns", "web") not in store.index().by_name
    assert store.index().by_name[("ns", "renamed")].uid == "u1"
    assert first.by_name[("ns", "web")] is new  # an index taken earlier never changes
