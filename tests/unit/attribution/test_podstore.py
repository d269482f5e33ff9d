"""PodStore.replace, the whole list at once: past MAX_PODS pods are refused (with the ones the
list did not read), and a UID listed twice keeps its later entry under its later name only."""

from __future__ import annotations

from podgpu.attribution.podstore import MAX_PODS, PodInfo, PodStore


def test_replace_keeps_max_pods_and_counts_the_rest_with_the_unread_ones() -> None:
    store = PodStore()
    store.replace((PodInfo(f"u{i}", "ns", f"p{i}") for i in range(MAX_PODS + 5)), more=100)
    assert len(store) == MAX_PODS
    assert store.refused == 5 + 100
    assert "u0" in store.index().by_uid and f"u{MAX_PODS}" not in store.index().by_uid
    store.replace([PodInfo("u0", "ns", "p0")])
    assert len(store) == 1 and store.refused == 0


def test_a_uid_listed_twice_keeps_its_later_name_only() -> None:
    store = PodStore()
    store.replace([PodInfo("u1", "ns", "old"), PodInfo("u1", "ns", "new")])
    index = store.index()
    assert set(index.by_name) == {("ns", "new")}
    assert index.by_uid["u1"].name == "new"
