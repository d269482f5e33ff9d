"""Pod objects as the API serves them -> PodInfo (parsing, separate from the watch)."""

from __future__ import annotations

from podgpu.attribution.podstore import PodIndex, PodInfo
from podgpu.attribution.podwatch import bare_container_id, parse_pod


def pod_json(uid: str = "u-1", **status: object) -> dict[str, object]:
    return {
        "metadata": {"uid": uid, "namespace": "ml", "name": "train",
                     "labels": {"team": "a", "app": "x"}, "resourceVersion": "12",
                     "creationTimestamp": "2026-12-02T10:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": status,
    }


def test_parse_pod_maps_every_started_container() -> None:
    info = parse_pod(pod_json(
        initContainerStatuses=[{"name": "init", "containerID": "containerd://" + "a" * 64}],
        containerStatuses=[{"name": "main", "containerID": "cri-o://" + "b" * 64},
                           {"name": "waiting"}],  # not started: no id yet
        ephemeralContainerStatuses=[{"name": "debug", "containerID": "docker://" + "c" * 64}],
    ))
    assert info == PodInfo("u-1", "ml", "train", (("app", "x"), ("team", "a")),
                           (("a" * 64, "init"), ("b" * 64, "main"), ("c" * 64, "debug")),
                           "2026-12-02T10:00:00Z")
    assert info.container_name("b" * 64) == "main"
    assert info.container_name("z" * 64) == ""


def test_parse_pod_tolerates_missing_parts() -> None:
    assert parse_pod({"metadata": {"name": "x"}}) is None  # no uid: useless
    info = parse_pod({"metadata": {"uid": "u"}})
    assert info == PodInfo("u", "", "")


def test_bare_container_id() -> None:
    assert bare_container_id("containerd://abc") == "abc"
    assert bare_container_id("cri-o://abc") == "abc"
    assert bare_container_id("docker://abc") == "abc"
    assert bare_container_id("other://abc") == "abc"
    assert bare_container_id("abc") == "abc"
    assert bare_container_id("") == ""


def test_index_by_uid_and_name() -> None:
    a, b = PodInfo("u1", "ns", "a"), PodInfo("u2", "ns", "b")
    idx = PodIndex.of({"u1": a, "u2": b})
    assert idx.by_uid["u2"] is b
    assert idx.by_name[("ns", "a")] is a


def test_a_name_held_twice_resolves_to_the_newer_pod() -> None:
    old = PodInfo("u-old", "db", "pg-0", created="2026-12-01T09:00:00Z")
    new = PodInfo("u-new", "db", "pg-0", created="2026-12-02T09:00:00Z")
    for order in ({"u-new": new, "u-old": old}, {"u-old": old, "u-new": new}):
        idx = PodIndex.of(order)
        assert idx.by_name[("db", "pg-0")] is new
        assert set(idx.by_uid) == {"u-old", "u-new"}  # processes of either still resolve
