"""The cluster's Services, reduced to what Container Insights' `Service` needs: namespace, name
and selector, and which of them selects a pod.

The add-on names a pod's GPU events with the first Service that selects the pod (field `Service`
on ContainerGPU and PodGPU events, and the pod level's `["ClusterName","Namespace","Service"]`
dimension set; neither when no Service selects the pod). A Service selects a pod when every
key/value of its `spec.selector` is among the pod's labels; a Service with an empty or absent
selector selects nothing (Kubernetes' endpoints controller makes no endpoints for it), so it is
not kept. Of several, podgpu takes the first by name (ordinal order of the bytes) in the pod's
namespace, so every node and every restart names a pod the same way.

`ServiceWatcher` lists and watches `/api/v1/services` over kubeapi.py (bounded pages, per-event
cap, deadlines, bookmarks, a 410 relists), only with `--emf-container-insights`: RBAC needs
list/watch on services, cluster-wide (a pod on this node may be selected by any Service of its
namespace, and there is no field selector for that). It keeps at most MAX_SERVICES. A 403 (no
RBAC) empties the index and is logged once; another failure keeps what the last list said (as
the pod watch does) and is logged once per distinct reason; both are retried with backoff, and
the events go on without `Service` meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.kubeapi import (
    Connection,
    KubeApiError,
    KubeConfig,
    NotInCluster,
    describe,
    in_cluster,
    lines,
)

log = logging.getLogger(__name__)

SERVICES_PATH = "/api/v1/services"
MAX_SERVICES = 10_000
"""Services with a selector kept. Kubernetes' scalability thresholds name 10,000 Services per
cluster; each kept one is its namespace, name and selector (a few hundred bytes), so the cap
bounds the index at a few MiB. Past it Services are not kept and one line is logged."""
MAX_SELECTOR_PAIRS = 64
"""Selector pairs kept per Service (real selectors have one to four): a longer one is kept
cut to its first pairs by key, which can only make it select more pods, never fewer."""
LIST_PAGE = 100
"""Services asked for per list page: a page's parsed JSON is the list's memory peak (about
5 KiB of Python objects per Service), so 100 keep it near half a MiB however big the cluster."""
MAX_LIST_PAGE_BYTES = 16 * 1024 * 1024
"""Of one list page read (100 Services of 160 KiB each; a Service's JSON is about 1-2 KiB)."""
LIST_TIMEOUT_SECONDS = 60.0
WATCH_TIMEOUT_SECONDS = 300
WATCH_READ_MARGIN_SECONDS = 30.0
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
    meta = obj.get("metadata") or {}
    name, ns = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(ns, str):
        return None
    spec = obj.get("spec") or {}
    raw = spec.get("selector") if isinstance(spec, dict) else None
    pairs = sorted((str(k), str(v)) for k, v in raw.items()) if isinstance(raw, dict) else []
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


class _Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class ServiceWatcher:
    """Keeps a `ServiceIndex` up to date on a daemon thread. `configuration` None: in-cluster
    (from `environ`, default the process's). `status` says how it goes, for /health."""

    def __init__(self, *, configuration: KubeConfig | None = None,
                 environ: Mapping[str, str] | None = None,
                 cap: int = MAX_SERVICES,
                 watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
                 max_backoff_seconds: float = MAX_BACKOFF_SECONDS) -> None:
        self.index = ServiceIndex(cap)
        self._configuration = configuration
        self._environ = environ
        self._watch_timeout = watch_timeout_seconds
        self._max_backoff = max_backoff_seconds
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None
        self._logged: set[str] = set()
        self._refused_logged = False
        self.errors = 0
        self.status = "starting"

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        return self.index.first(namespace, labels)

    def health(self) -> dict[str, object]:
        return {"status": self.status, "services": len(self.index), "errors": self.errors}

    def start(self, wait_seconds: float = 1.0) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="podgpu-services", daemon=True)
        self._thread.start()
        if wait_seconds > 0:
            self._synced.wait(wait_seconds)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._conn is not None:
            self._conn.interrupt()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _once(self, why: str) -> None:
        if why not in self._logged and len(self._logged) < 16:
            self._logged.add(why)
            log.warning("Container Insights: no Service names (%s); GPU events are sent "
                        "without Service", why)

    def _run(self) -> None:
        try:
            cfg = self._configuration or in_cluster(
                os.environ if self._environ is None else self._environ)
            conn = self._conn = Connection(cfg)
        except (NotInCluster, OSError, ValueError) as exc:
            self.status = f"unavailable: {exc}"
            self._once(str(exc))
            self._synced.set()
            return
        backoff = 1.0
        try:
            while not self._stop.is_set():
                try:
                    rv = self._list(conn)
                    backoff = 1.0
                    while not self._stop.is_set():
                        started = time.monotonic()
                        rv = self._watch(conn, rv)
                        if time.monotonic() - started < 1.0:
                            self._stop.wait(1.0)
                except _Gone:
                    continue
                except Exception as exc:
                    if self._stop.is_set():
                        return
                    self.errors += 1
                    why = describe(exc)
                    if isinstance(exc, KubeApiError) and exc.status == 403:
                        why = "403 Forbidden: the service account needs list/watch on services"
                        self.index.replace(())  # not allowed to know them: none
                    self.status = f"failing: {why}"
                    self._once(why)
                    self._synced.set()
                    self._stop.wait(backoff)
                    backoff = min(self._max_backoff, backoff * 2)
        finally:
            conn.close()

    def _list(self, conn: Connection) -> str:
        """List in pages of LIST_PAGE, each within LIST_TIMEOUT_SECONDS and MAX_LIST_PAGE_BYTES;
        the index is replaced once the last page is in."""
        services: list[ServiceInfo] = []
        kept = 0
        token = ""
        meta: Any = {}
        while not self._stop.is_set():
            query = {"limit": str(LIST_PAGE)}
            if token:
                query["continue"] = token
            body = conn.get_json(SERVICES_PATH, query, timeout=LIST_TIMEOUT_SECONDS,
                                 max_bytes=MAX_LIST_PAGE_BYTES)
            items = body.get("items")
            for item in items if isinstance(items, list) else ():
                s = parse_service(item) if isinstance(item, dict) else None
                if s is not None and s.selector:
                    services.append(s)
                    kept += 1
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token or kept > self.index.cap:  # the rest would not be kept either
                break
        self.index.replace(services)
        del services
        self._refused_logged = False
        self._log_refused()
        self.status = "ok"
        self._synced.set()
        self._logged.clear()
        return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""

    def _log_refused(self) -> None:
        if self.index.refused and not self._refused_logged:
            self._refused_logged = True
            log.warning("Container Insights: more than %d Services with a selector; the rest "
                        "are not kept, and pods they select have no Service", MAX_SERVICES)

    def _watch(self, conn: Connection, rv: str) -> str:
        query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(self._watch_timeout)}
        limit = self._watch_timeout + WATCH_READ_MARGIN_SECONDS
        with conn.deadline(limit):
            try:
                resp = conn.open(SERVICES_PATH, query, timeout=limit)
            except KubeApiError as exc:
                if exc.status == 410:
                    raise _Gone() from None
                raise
            try:
                for line in lines(resp):
                    if self._stop.is_set():
                        break
                    rv = self._apply(json.loads(line), rv)
            finally:
                resp.close()
                conn.close()
        return rv

    def _apply(self, event: Mapping[str, Any], rv: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if not isinstance(obj, dict):
            return rv
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error: {str(obj.get('message') or obj)[:300]}")
        meta = obj.get("metadata") or {}
        new_rv = str(meta.get("resourceVersion") or rv) if isinstance(meta, dict) else rv
        if kind == "BOOKMARK":
            return new_rv
        s = parse_service(obj)
        if s is None:
            return new_rv
        if kind == "DELETED":
            self.index.delete(s.namespace, s.name)
        elif not self.index.put(s):
            self._log_refused()
        return new_rv
