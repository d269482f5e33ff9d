"""The pod watch's pods: `PodInfo`, an immutable `PodIndex` for readers, and the `PodStore` the
watch thread changes one event at a time, in time independent of how many pods there are (each
event re-sorting every pod took 45 s for 9,000 pods with the GIL held)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from podgpu.attribution.workload import PodGpus

MAX_PODS = 1024
"""Pods of this node kept. The kubelet's default `maxPods` is 110 and Kubernetes documents 110
pods per node as its limit for large clusters; EKS's per-instance table reaches 737 on the
largest instance types. 1,024 is above every limit a node runs with, so only a field selector
the API server ignored (or a hostile stand-in) reaches it; past it pods are not kept and one line
is logged."""


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the API says about one pod on this node. `containers` maps runtime container id (bare
    hex) to container name, for init, regular and ephemeral containers that have started."""

    uid: str
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    containers: tuple[tuple[str, str], ...] = ()
    created: str = ""
    """metadata.creationTimestamp (RFC 3339, so it sorts as text); '' when absent."""
    owners: tuple[tuple[str, str], ...] = ()  # (kind, name), the controller first: workload.py
    gpus: PodGpus = field(default_factory=PodGpus)  # nvidia.com/gpu requests, limits; phase

    def container_name(self, container_id: str) -> str:
        for cid, name in self.containers:
            if cid == container_id:
                return name
        return ""


@dataclass(frozen=True, slots=True)
class PodIndex:
    """An immutable view of the node's pods, swapped in whole after every change."""

    by_uid: Mapping[str, PodInfo] = field(default_factory=dict)
    by_name: Mapping[tuple[str, str], PodInfo] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Mapping[str, PodInfo]) -> PodIndex:
        """Index `pods` (by UID). A name held by two UIDs (a StatefulSet pod re-created while
        the old one terminates) resolves to the newer pod, which is the one the kubelet lists
        with devices."""
        by_name: dict[tuple[str, str], PodInfo] = {}
        for p in sorted(pods.values(), key=lambda p: (p.created, p.uid)):
            by_name[(p.namespace, p.name)] = p
        return cls(dict(pods), by_name)


def _newest(group: Mapping[str, PodInfo]) -> PodInfo:
    return max(group.values(), key=lambda p: (p.created, p.uid))


class PodStore:
    """The watcher's mutable pods, changed one event at a time in time independent of how many
    pods there are (a name held by two UIDs resolves to the newer pod, as `PodIndex.of`). The
    collect thread takes a `PodIndex` copy once per cycle when something changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodInfo] = {}
        self._by_name: dict[tuple[str, str], PodInfo] = {}
        self._groups: dict[tuple[str, str], dict[str, PodInfo]] = {}
        self._index = PodIndex()
        self._dirty = False
        self.refused = 0
        """Pods not kept because MAX_PODS were kept already, since the last list."""

    def replace(self, pods: Iterable[PodInfo], more: int = 0) -> None:
        """All pods at once (a list); past MAX_PODS they are not kept, and `more` pods the list
        did not read are refused with them."""
        with self._lock:
            self._by_uid, self._by_name, self._groups = {}, {}, {}
            self.refused = more
            for p in pods:
                self._add(p)  # a pod listed twice: the later one
            self._dirty = True

    def put(self, p: PodInfo) -> bool:
        """Add or update one pod; False (and not kept) when MAX_PODS are kept already."""
        with self._lock:
            if not self._add(p):
                return False
            self._dirty = True
            return True

    def _add(self, p: PodInfo) -> bool:
        """`put` without the lock (the caller holds it); False when not kept (counted)."""
        old = self._by_uid.get(p.uid)
        if old is None and len(self._by_uid) >= MAX_PODS:
            self.refused += 1
            return False
        if old is not None and (old.namespace, old.name) != (p.namespace, p.name):
            self._drop(old)
        self._put(p)
        return True

    def delete(self, uid: str) -> None:
        with self._lock:
            old = self._by_uid.get(uid)
            if old is not None:
                self._drop(old)
                self._dirty = True

    def _put(self, p: PodInfo) -> None:
        key = (p.namespace, p.name)
        self._by_uid[p.uid] = p
        group = self._groups.setdefault(key, {})
        group[p.uid] = p
        self._by_name[key] = p if len(group) == 1 else _newest(group)

    def _drop(self, p: PodInfo) -> None:
        key = (p.namespace, p.name)
        del self._by_uid[p.uid]
        group = self._groups.get(key, {})
        group.pop(p.uid, None)
        if group:
            self._by_name[key] = _newest(group)
        else:
            self._groups.pop(key, None)
            self._by_name.pop(key, None)

    def __len__(self) -> int:
        return len(self._by_uid)

    def index(self) -> PodIndex:
        """The pods now, as an immutable index (a new one only after a change)."""
        with self._lock:
            if self._dirty:
                self._index = PodIndex(dict(self._by_uid), dict(self._by_name))
                self._dirty = False
            return self._index
