"""The cluster's Services, reduced to what Container Insights' `Service` needs: namespace, name
and selector, and which of them selects a pod.

The add-on names a pod's GPU events with the first Service that selects the pod (field `Service`
on ContainerGPU and PodGPU events, and the pod level's `["ClusterName","Namespace","Service"]`
dimension set; neither when no Service selects the pod). A Service selects a pod when every
key/value of its `spec.selector` is among the pod's labels; a Service with an empty or absent
selector selects nothing (Kubernetes' endpoints controller makes no endpoints for it), so it is
not kept. Of several, podgpu takes the first by name (ordinal order of the bytes) in the pod's
namespace, so every node and every restart names a pod the same way.

`ServiceWatcher` is the Service kind on reflector.py's list-then-watch loop (bounded pages,
per-event cap, deadlines, bookmarks, a 410 relists) of `/api/v1/services`, only with
`--emf-container-insights`: RBAC needs list/watch on services, cluster-wide (a pod on this node
may be selected by any Service of its namespace, and there is no field selector for that). It
keeps at most MAX_SERVICES. A 403 (no RBAC) empties the index and is logged once; another
failure keeps what the last list said (as the pod watch does) and is logged once per distinct
reason; both are retried with backoff, and the events go on without `Service` meanwhile.
/health's Container Insights part shows the state (`services`: status, Services kept, failed
calls).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.apijson import mapping, text
from podgpu.attribution.apiserver import ApiCaller
from podgpu.attribution.kubeapi import KubeApiError, KubeConfig
from podgpu.attribution.reflector import LIST_PAGE, WATCH_TIMEOUT_SECONDS, Reflector

log = logging.getLogger(__name__)

SERVICES_PATH = "/api/v1/services"
MAX_SERVICES = 10_000
"""Services with a selector kept. Kubernetes' scalability thresholds name 10,000 Services per
cluster; each kept one is its namespace, name and selector (a few hundred bytes), so the cap
bounds the index at a few MiB. Past it Services are not kept and one line is logged."""
MAX_SELECTOR_PAIRS = 64
"""Selector pairs kept per Service (real selectors have one to four): a longer one is kept
cut to its first pairs by key, which can only make it select more pods, never fewer."""
MAX_BACKOFF_SECONDS = 300.0
"""Up to five minutes between attempts: RBAC granted later is picked up without a restart."""


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    namespace: str
    name: str
    selector: tuple[tuple[str, str], ...]
    """Sorted (key, value) pairs; empty: selects nothing."""


def parse_service(obj: Mapping[str, Any]) -> ServiceInfo | None:
    """A Service object (JSON as the API serves it) -> ServiceInfo; None without a name."""
    meta = mapping(obj.get("metadata"))
    name, ns = text(meta.get("name")), meta.get("namespace")
    if not name or not isinstance(ns, str):
        return None
    raw = mapping(mapping(obj.get("spec")).get("selector"))
    pairs = sorted((str(k), str(v)) for k, v in raw.items())
    return ServiceInfo(sys.intern(ns), name, tuple(
        (sys.intern(k), v) for k, v in pairs[:MAX_SELECTOR_PAIRS]))


def selects(selector: tuple[tuple[str, str], ...], labels: Mapping[str, str]) -> bool:
    """Whether a Service's selector selects a pod with `labels` (empty: never)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector)


class ServiceIndex:
    """Services by namespace, changed one event at a time; `first` answers from a memo that a
    change clears. Thread-safe: the watch thread writes, the collect thread reads."""

    def __init__(self, cap: int = MAX_SERVICES) -> None:
        self._cap = cap
        self._lock = threading.Lock()
        self._by_ns: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {}
        self._count = 0
        self._memo: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self.refused = 0
        """Services not kept because `cap` were kept already, since the last replace."""

    def __len__(self) -> int:
        return self._count

    @property
    def cap(self) -> int:
        return self._cap

    def replace(self, services: Iterable[ServiceInfo]) -> None:
        with self._lock:
            self._by_ns, self._count, self._memo, self.refused = {}, 0, {}, 0
            for s in services:
                self._put(s)

    def put(self, s: ServiceInfo) -> bool:
        """Add, change or (without a selector) drop one Service; False when not kept (cap)."""
        with self._lock:
            self._memo = {}
            return self._put(s)

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            self._memo = {}
            self._drop(namespace, name)

    def _put(self, s: ServiceInfo) -> bool:
        if not s.selector:
            self._drop(s.namespace, s.name)
            return True
        ns = self._by_ns.setdefault(s.namespace, {})
        if s.name not in ns:
            if self._count >= self._cap:
                self.refused += 1
                if not ns:
                    del self._by_ns[s.namespace]
                return False
            self._count += 1
        ns[s.name] = s.selector
        return True

    def _drop(self, namespace: str, name: str) -> None:
        ns = self._by_ns.get(namespace)
        if ns is not None and ns.pop(name, None) is not None:
            self._count -= 1
            if not ns:
                del self._by_ns[namespace]

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        """The first Service by name in `namespace` that selects a pod with `labels` (sorted
        pairs, as PodInfo.labels); '' when none does."""
        key = (namespace, labels)
        with self._lock:
            found = self._memo.get(key)
            if found is None:
                pod = dict(labels)
                ns = self._by_ns.get(namespace, {})
                found = min((n for n, sel in ns.items() if selects(sel, pod)), default="")
                if len(self._memo) > 4096:  # pod churn between two Service changes
                    self._memo = {}
                self._memo[key] = found
            return found


class ServiceWatcher(Reflector[ServiceInfo]):
    """Keeps a `ServiceIndex` up to date on a daemon thread. `configuration` None: in-cluster
    (from `environ`, default the process's). `health()` says how it goes, for /health."""

    def __init__(self, *, configuration: KubeConfig | None = None,
                 environ: Mapping[str, str] | None = None,
                 cap: int = MAX_SERVICES, list_page: int = LIST_PAGE,
                 watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
                 max_backoff_seconds: float = MAX_BACKOFF_SECONDS) -> None:
        super().__init__(
            SERVICES_PATH,
            ApiCaller("Container Insights' Service list/watch", rbac="list/watch on services",
                      without="GPU events are sent without Service",
                      configuration=configuration, environ=environ),
            cap=cap, thread_name="podgpu-services", list_page=list_page,
            watch_timeout_seconds=watch_timeout_seconds,
            max_backoff_seconds=max_backoff_seconds)
        self.index = ServiceIndex(cap)
        self._refused_logged = False

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        return self.index.first(namespace, labels)

    def health(self) -> dict[str, object]:
        """The `services` entry of /health's Container Insights part: status, Services kept,
        failed calls."""
        return {**self.api.health(), "services": len(self.index)}

    def parse(self, obj: Mapping[str, Any]) -> ServiceInfo | None:
        return parse_service(obj)

    def listed(self, item: ServiceInfo) -> bool:
        return bool(item.selector)  # one without a selector selects nothing: not kept

    def replace(self, items: list[ServiceInfo], more: int) -> None:
        self.index.replace(items)
        self._refused_logged = False
        self._log_refused()

    def apply(self, event: str, item: ServiceInfo) -> None:
        if event == "DELETED":
            self.index.delete(item.namespace, item.name)
        elif not self.index.put(item):
            self._log_refused()

    def failed(self, exc: Exception) -> None:
        """Counted and said; a 403 (not allowed to know the Services) also empties the index."""
        super().failed(exc)
        if isinstance(exc, KubeApiError) and exc.status == 403:
            self.index.replace(())

    def _log_refused(self) -> None:
        if self.index.refused and not self._refused_logged:
            self._refused_logged = True
            log.warning("Container Insights: more than %d Services with a selector; the rest "
                        "are not kept, and pods they select have no Service", self.index.cap)
