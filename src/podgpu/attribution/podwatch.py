"""Node-scoped pod list/watch: pod UID -> (namespace, name, labels), container id -> name.

The one module that talks to the Kubernetes API (STYLE rule 3), with the `kubernetes` client,
imported here only. It lists and watches only the pods of this node (field selector
`spec.nodeName=<NODE_NAME>`), so RBAC needs only get/list/watch on pods and the cost stays flat as
the cluster grows. Objects are read as raw JSON and parsed by `parse_pod` (tested on literal
JSON), not through the client's slow model classes.

Needed because the kubelet's PodResources API has no pod UID and cgroup paths have nothing else:
this joins NVML processes (pid -> cgroup -> pod UID, container id) to pod names, and gives
allocations their pod UID and labels. Without API access (not in a cluster, no NODE_NAME, no
token) the watcher logs one line saying why and stays empty: processes then carry `pod_uid` only.
"""

from __future__ import annotations

import importlib
import json
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300
"""Server-side watch timeout; the watch is re-opened from the last resourceVersion after it."""
MAX_BACKOFF_SECONDS = 60.0
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
    )


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


class _Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class PodWatcher:
    """Keeps a `PodIndex` of this node's pods up to date on a daemon thread.

    `configuration` is a `kubernetes.client.Configuration`; None means in-cluster config (service
    account token and KUBERNETES_SERVICE_HOST). `errors` counts failed list/watch calls
    (`podgpu_collect_errors_total{source="podwatch"}`); `available` is False when there is no API
    access at all, with `reason` saying why.
    """

    def __init__(
        self,
        node_name: str | None,
        *,
        configuration: Any = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self._node = node_name or ""
        self._configuration = configuration
        self._watch_timeout = watch_timeout_seconds
        self._max_backoff = max_backoff_seconds
        self._index = PodIndex()
        self._pods: dict[str, PodInfo] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._last_error = ""
        self.errors = 0
        self.available = True
        self.reason = ""

    @property
    def index(self) -> PodIndex:
        return self._index

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
        _interrupt(self._response)
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _unavailable(self, why: str) -> None:
        self.available = False
        self.reason = why
        log.warning("no Kubernetes API access (%s): GPU processes are attributed by pod UID only, "
                    "without pod names, pod UIDs on allocations or pod labels", why)

    def _connect(self) -> Any:
        try:
            client = importlib.import_module("kubernetes.client")
            cfg = self._configuration
            if cfg is None:
                config = importlib.import_module("kubernetes.config")
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                cfg.retries = 0  # this module retries with backoff; no urllib3 retry warnings
            return client.CoreV1Api(client.ApiClient(cfg))
        except ImportError as exc:
            self._unavailable(f"the kubernetes package is not installed: {exc}")
        except Exception as exc:  # ConfigException: not in a cluster, no token
            self._unavailable(f"{type(exc).__name__}: {exc}")
        return None

    def _run(self) -> None:
        api = self._connect()  # here, not in start(): importing the client takes ~1 s
        if api is None:
            self._synced.set()
            return
        backoff = 1.0
        while not self._stop.is_set():
            try:
                rv = self._list(api)
                backoff = 1.0
                while not self._stop.is_set():
                    started = time.monotonic()
                    rv = self._watch(api, rv)
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

    def _list(self, api: Any) -> str:
        resp = api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self._node}",
            _preload_content=False,
            _request_timeout=(10, 60),
        )
        body = json.loads(resp.data)
        pods: dict[str, PodInfo] = {}
        for item in body.get("items") or ():
            info = parse_pod(item)
            if info is not None:
                pods[info.uid] = info
        self._pods = pods
        self._index = PodIndex.of(pods)
        self._synced.set()
        if self._last_error:
            log.info("pod list/watch works again")
            self._last_error = ""
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, api: Any, rv: str) -> str:
        watch_mod = importlib.import_module("kubernetes.watch.watch")
        resp = api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self._node}",
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30),
        )
        self._response = resp
        try:
            for line in watch_mod.iter_resp_lines(resp):
                if self._stop.is_set():
                    break
                if line:
                    rv = self._apply(json.loads(line), rv)
        finally:
            self._response = None
            resp.release_conn()
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
        pods = dict(self._pods)
        if kind == "DELETED":
            pods.pop(info.uid, None)
        else:
            pods[info.uid] = info
        self._pods = pods
        self._index = PodIndex.of(pods)
        return new_rv


def _interrupt(resp: Any) -> None:
    """Unblock a thread reading a watch stream: shut the socket down under urllib3's feet
    (closing the response alone leaves the reader blocked until the server's watch timeout)."""
    if resp is None:
        return
    try:
        conn = getattr(resp, "connection", None) or getattr(resp, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        resp.close()
    except Exception:
        log.debug("interrupting the watch failed", exc_info=True)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status == 403:
        return "403 Forbidden: the service account needs get/list/watch on pods"
    if isinstance(status, int) and status:
        return f"HTTP {status}: {getattr(exc, 'reason', '')}"
    return f"{type(exc).__name__}: {exc}"[:300]


def read_configmap(namespace: str, name: str, key: str = "metrics", *,
                   configuration: Any = None) -> str:
    """The text under `key` of ConfigMap NAMESPACE/NAME (dcgm-exporter's `-m`, issue 9).

    Here because this module is podgpu's one Kubernetes API client (STYLE rule 3). RBAC: `get` on
    that ConfigMap (a Role in its namespace is enough). A missing ConfigMap, key or content is the
    user's input: ConfigError (exit 2). No API access at all is AttributionError (exit 1), as
    dcgm-exporter also stops rather than fall back to a file once `-m` is set.
    """
    from podgpu.errors import AttributionError, ConfigError

    where = f"--configmap-data {namespace}:{name}"
    try:
        client = importlib.import_module("kubernetes.client")
        cfg = configuration
        if cfg is None:
            config = importlib.import_module("kubernetes.config")
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
        cfg.retries = 1
        api = client.CoreV1Api(client.ApiClient(cfg))
        resp = api.read_namespaced_config_map(name, namespace, _preload_content=False,
                                              _request_timeout=(10, 30))
        body = json.loads(resp.data)
    except ImportError as exc:
        raise AttributionError(f"{where}: the kubernetes package is not installed: {exc}") from None
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == 404:
            raise ConfigError(f"{where}: ConfigMap {name!r} not found in namespace "
                              f"{namespace!r}") from None
        if status == 403:
            raise AttributionError(f"{where}: 403 Forbidden: the service account needs get on "
                                   f"configmaps in {namespace!r}") from None
        raise AttributionError(f"{where}: cannot read it: {_describe(exc)}") from None
    data = body.get("data") or {}
    if key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise ConfigError(f"{where}: the ConfigMap has no {key!r} key (keys: {keys})")
    text = str(data[key])
    if not text.strip():
        raise ConfigError(f"{where}: the {key!r} key is empty")
    return text
