"""The reflector with the smallest kind (a pod's UID, kept in lists) against the API stand-in:
a list that passes the cap ends with the count of the objects it did not read, and a watch that
ends at once is followed by a one-second pause, counted through the injected clock and wait,
not timed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from podgpu.attribution.apiserver import ApiCaller
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.reflector import ANTI_SPIN_SECONDS, Reflector
from tests.harness import wait_for
from tests.integration.kube_api_fake import FakeKubeApi, pod


class Uids(Reflector[str]):
    """This node's pods, as UIDs: what the reflector hands a kind, recorded."""

    def __init__(self, api: FakeKubeApi, **kwargs: Any) -> None:
        super().__init__("/api/v1/pods", ApiCaller("UID list/watch", rbac="list/watch on pods",
                                                   without="nothing",
                                                   configuration=KubeConfig(api.url)),
                         thread_name="uids", selector={"fieldSelector": "spec.nodeName=n1"},
                         **kwargs)
        self.lists: list[tuple[list[str], int]] = []
        self.events: list[tuple[str, str]] = []

    def parse(self, obj: Mapping[str, Any]) -> str | None:
        return str(obj["metadata"]["uid"])

    def replace(self, items: list[str], more: int) -> None:
        self.lists.append((items, more))

    def apply(self, event: str, item: str) -> None:
        self.events.append((event, item))


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


def watches(api: FakeKubeApi) -> int:
    return sum(1 for r in api.requests if r.get("watch") == ["true"])


def test_a_list_past_the_cap_stops_and_counts_what_it_did_not_read(api: FakeKubeApi) -> None:
    for i in range(7):
        api.put(pod(f"u{i}", "ml", f"p{i}"))
    r = Uids(api, cap=3, list_page=2)
    r.start(wait_seconds=5)
    try:
        assert r.lists == [(["u0", "u1", "u2", "u3"], 3)]  # 2 pages; remainingItemCount 3
        assert len(api.list_requests()) == 2
        api.put(pod("u9", "ml", "p9"))
        wait_for(lambda: r.events == [("ADDED", "u9")], what="the watched ADDED event")
    finally:
        r.close()


@pytest.mark.parametrize(("step", "pauses"), [(0.0, True), (2 * ANTI_SPIN_SECONDS, False)])
def test_a_watch_that_ends_at_once_is_followed_by_a_pause(
        api: FakeKubeApi, step: float, pauses: bool) -> None:
    """The stand-in ends each watch at once (timeoutSeconds=0). With a clock that does not move
    each watch took no time and is followed by one wait of ANTI_SPIN_SECONDS; with a clock that
    moves 2 s per reading none is."""
    ticks = itertools.count()
    clock: Callable[[], float] = lambda: next(ticks) * step  # noqa: E731
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return False

    r = Uids(api, cap=10, watch_timeout_seconds=0, clock=clock, wait=wait)
    r.start(wait_seconds=5)
    try:
        wait_for(lambda: watches(api) >= 5, what="five watches")
    finally:
        r.close()
    done, paused = watches(api), [w for w in waits if w > 0]
    if pauses:
        assert set(paused) == {ANTI_SPIN_SECONDS} and done - 1 <= len(paused) <= done
    else:
        assert paused == []
    assert r.errors == 0 and len(api.list_requests()) == 1
