"""Node-scoped pod list/watch: pod UID -> (namespace, name, labels), container id -> name.

The one module that talks to the Kubernetes API, over kubeapi.py's plain HTTPS
(the `kubernetes` client cost 46 MiB steady for this). It lists and watches only the
pods of this node (field selector `spec.nodeName=<NODE_NAME>`), so RBAC needs only get/list/watch
on pods and the cost stays flat as the cluster grows. Objects are read as raw JSON and parsed by
`parse_pod` (tested on literal JSON).

The watch follows the API's contract: it starts from the list's resourceVersion, asks for
bookmarks (which advance the version without a change, so a re-opened watch rarely replays or
expires), ends after a server-side timeout and is re-opened from the last version seen; a 410
Gone (as the answer or as an ERROR event) means that version was compacted away: list again.
Failures are counted and retried with exponential backoff up to `max_backoff_seconds`.

Needed because the kubelet's PodResources API has no pod UID and cgroup paths have nothing else:
this joins NVML processes (pid -> cgroup -> pod UID, container id) to pod names, and gives
allocations their pod UID and labels. Without API access (not in a cluster, no NODE_NAME, no
token) the watcher logs one line saying why and stays empty: processes then carry `pod_uid` only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
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
from podgpu.attribution.podstore import MAX_PODS, PodStore
from podgpu.attribution.podstore import PodIndex as PodIndex  # re-exported: its readers import it here
from podgpu.attribution.workload import PodGpus, controller_owners, pod_gpus

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300
"""Server-side watch timeout; the watch is re-opened from the last resourceVersion after it."""
MAX_BACKOFF_SECONDS = 60.0
LIST_TIMEOUT_SECONDS = 60.0
"""Deadline of one pod list (s): connect and every read."""
WATCH_READ_MARGIN_SECONDS = 30.0
"""A watch's read timeout is the server-side timeout plus this (s): a server that went silent
(a half-open connection) is noticed, one that ends the watch on time is not cut short."""
PODS_PATH = "/api/v1/pods"
LIST_PAGE_PODS = 100
"""Pods asked for per list page (`limit`, continued with the `continue` token), so one answer
is at most a page, not the whole list."""
MAX_LIST_PAGE_BYTES = 16 * 1024 * 1024
"""Of one list page read (100 pods of 160 KiB each; a pod's JSON is typically 5-20 KiB):
past it the page is refused, counted as a failed list and retried with backoff."""
_RUNTIME_SCHEMES = ("containerd://", "cri-o://", "docker://", "cri-dockerd://")


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


def bare_container_id(text: str) -> str:
    """`containerd://<hex>` (or cri-o://, docker://) -> `<hex>`; '' for an empty id."""
    for scheme in _RUNTIME_SCHEMES:
        if text.startswith(scheme):
            return text[len(scheme):]
    _, sep, rest = text.partition("://")
    return rest if sep else text


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """A Pod object (JSON as the API serves it) -> PodInfo; None when it has no UID."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return None
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    containers: list[tuple[str, str]] = []
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or ():
            cid = bare_container_id(str(cs.get("containerID") or ""))
            if cid:
                containers.append((cid, str(cs.get("name") or "")))
    return PodInfo(
        uid=uid,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        containers=tuple(containers),
        created=str(meta.get("creationTimestamp") or ""),
        owners=controller_owners(meta),
        gpus=pod_gpus(obj),
    )


class _Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class PodWatcher:
    """Keeps a `PodIndex` of this node's pods up to date on a daemon thread.

    `configuration` says where the API is (tests point it at a stand-in); None means in-cluster
    configuration from `environ` (default: the process environment) and the mounted service
    account. `errors` counts failed list/watch calls (`podgpu_collect_errors_total{source=
    "podwatch"}`); `available` is False when there is no API access at all, `reason` says why.
    """

    def __init__(
        self,
        node_name: str | None,
        *,
        configuration: KubeConfig | None = None,
        environ: Mapping[str, str] | None = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        watch_read_margin_seconds: float = WATCH_READ_MARGIN_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self._node = node_name or ""
        self._read_margin = watch_read_margin_seconds
        self._configuration = configuration
        self._environ = environ
        self._watch_timeout = watch_timeout_seconds
        self._max_backoff = max_backoff_seconds
        self._store = PodStore()
        self._refused_logged = False
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None
        self._last_error = ""
        self.resource_version = ""
        """The last resourceVersion seen (list, event or bookmark): where a watch resumes."""
        self.errors = 0
        self.available = True
        self.reason = ""

    @property
    def index(self) -> PodIndex:
        return self._store.index()

    def start(self, wait_seconds: float = 1.0) -> None:
        """Connect and start watching; wait up to `wait_seconds` for the first list."""
        if self._thread is not None:
            return
        if not self._node:
            self._unavailable("NODE_NAME is not set, so the pod watch cannot be limited to this "
                              "node; set it from spec.nodeName with the downward API")
            return
        self._thread = threading.Thread(target=self._run, name="podgpu-podwatch", daemon=True)
        self._thread.start()
        if wait_seconds > 0:
            self._synced.wait(wait_seconds)

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the first list (or for giving up); True once done."""
        return self._synced.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._conn is not None:
            self._conn.interrupt()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _unavailable(self, why: str) -> None:
        self.available = False
        self.reason = why
        log.warning("no Kubernetes API access (%s): GPU processes are attributed by pod UID only, "
                    "without pod names, pod UIDs on allocations or pod labels", why)

    def _connect(self) -> Connection | None:
        try:
            cfg = self._configuration
            if cfg is None:
                cfg = in_cluster(os.environ if self._environ is None else self._environ)
            return Connection(cfg)
        except (NotInCluster, OSError, ValueError) as exc:  # OSError/ValueError: a bad CA file
            self._unavailable(str(exc))
        return None

    def _run(self) -> None:
        conn = self._connect()
        if conn is None:
            self._synced.set()
            return
        self._conn = conn
        backoff = 1.0
        try:
            while not self._stop.is_set():
                try:
                    rv = self._list(conn)
                    backoff = 1.0
                    while not self._stop.is_set():
                        started = time.monotonic()
                        rv = self._watch(conn, rv)
                        if time.monotonic() - started < 1.0:  # a proxy closing watches at once:
                            self._stop.wait(1.0)  # do not spin
                except _Gone:
                    continue
                except Exception as exc:
                    if self._stop.is_set():
                        return
                    self.errors += 1
                    why = _describe(exc)
                    if why != self._last_error:
                        self._last_error = why
                        log.warning("pod list/watch failed (%s); retrying in %.0f s", why, backoff)
                    self._stop.wait(backoff)
                    backoff = min(self._max_backoff, backoff * 2)
        finally:
            conn.close()

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self._node}"}

    def _list(self, conn: Connection) -> str:
        """List in pages of LIST_PAGE_PODS, each within LIST_TIMEOUT_SECONDS and
        MAX_LIST_PAGE_BYTES, keeping at most MAX_PODS pods."""
        pods: dict[str, PodInfo] = {}
        refused = 0
        token = ""
        while True:
            query = {**self._selector(), "limit": str(LIST_PAGE_PODS)}
            if token:
                query["continue"] = token
            body = conn.get_json(PODS_PATH, query, timeout=LIST_TIMEOUT_SECONDS,
                                 max_bytes=MAX_LIST_PAGE_BYTES)
            items = body.get("items") or ()
            for item in items if isinstance(items, list) else ():
                info = parse_pod(item) if isinstance(item, dict) else None
                if info is None:
                    continue
                if len(pods) >= MAX_PODS and info.uid not in pods:
                    refused += 1
                    continue
                pods[info.uid] = info
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token or self._stop.is_set():
                break
            if refused > 0:  # the rest would not be kept either
                rest = meta.get("remainingItemCount")
                refused += rest if isinstance(rest, int) and rest > 0 else 0
                break
        self._store.replace(pods)
        self._refused_logged = False
        if refused:
            self._log_refused(refused)
        self._synced.set()
        if self._last_error:
            log.info("pod list/watch works again")
            self._last_error = ""
        self.resource_version = str(meta.get("resourceVersion") or "") \
            if isinstance(meta, dict) else ""
        return self.resource_version

    def _log_refused(self, count: int) -> None:
        if not self._refused_logged:
            self._refused_logged = True
            log.warning("the API server lists more than %d pods on node %s (%d more); only %d "
                        "are kept (a node runs at most a few hundred: is the field selector "
                        "ignored?)", MAX_PODS, self._node, count, MAX_PODS)

    def _watch(self, conn: Connection, rv: str) -> str:
        query = {**self._selector(), "watch": "true", "resourceVersion": rv,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(self._watch_timeout)}
        # the whole watch (its answer's head included) ends by its server-side timeout plus
        # the margin, however slowly the server sends
        with conn.deadline(self._watch_timeout + self._read_margin):
            try:
                resp = conn.open(PODS_PATH, query,
                                 timeout=self._watch_timeout + self._read_margin)
            except KubeApiError as exc:
                if exc.status == 410:
                    raise _Gone() from None
                raise
            try:
                for line in lines(resp):
                    if self._stop.is_set():
                        break
                    rv = self.resource_version = self._apply(json.loads(line), rv)
            finally:
                # a new connection per watch: a stream left mid-way cannot be reused (and API
                # servers often close a connection after a watch anyway)
                resp.close()
                conn.close()
        return rv

    def _apply(self, event: Mapping[str, Any], rv: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            return new_rv
        info = parse_pod(obj)
        if info is None:
            return new_rv
        if kind == "DELETED":
            self._store.delete(info.uid)
        elif not self._store.put(info):
            self._log_refused(self._store.refused)
        return new_rv


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KubeApiError):
        if exc.status == 403:
            return "403 Forbidden: the service account needs get/list/watch on pods"
        if exc.status == 401:
            return "401 Unauthorized: the service-account token was refused"
    return describe(exc)
