"""Node-scoped pod list/watch: pod UID -> (namespace, name, labels), container id -> name.

The pod kind on reflector.py's list-then-watch loop (pages, bookmarks, 410, backoff), over
kubeapi.py's plain HTTPS (the `kubernetes` client cost 46 MiB steady for this). It lists and
watches only the pods of this node (field selector `spec.nodeName=<NODE_NAME>`), so RBAC needs
only get/list/watch on pods and the cost stays flat as the cluster grows. Objects are read as raw
JSON and parsed by `parse_pod` (tested on literal JSON) into podstore.py's `PodStore`.

Needed because the kubelet's PodResources API has no pod UID and cgroup paths have nothing else:
this joins NVML processes (pid -> cgroup -> pod UID, container id) to pod names, and gives
allocations their pod UID and labels. Without API access (not in a cluster, no NODE_NAME, no
token) the watcher logs one line saying why and stays empty: processes then carry `pod_uid` only.
Failures (apiserver.py: CA, token, connection, answer) are counted
(`podgpu_collect_errors_total{source="podwatch"}`) and shown in /health's `pod_watch` entry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from podgpu.attribution.apijson import mapping, sequence, text
from podgpu.attribution.apiserver import ApiCaller
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.podstore import MAX_PODS, PodIndex, PodInfo, PodStore
from podgpu.attribution.reflector import (
    WATCH_READ_MARGIN_SECONDS,
    WATCH_TIMEOUT_SECONDS,
    Reflector,
)
from podgpu.attribution.workload import controller_owners, pod_gpus

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 60.0
PODS_PATH = "/api/v1/pods"
_RUNTIME_SCHEMES = ("containerd://", "cri-o://", "docker://", "cri-dockerd://")


def bare_container_id(text: str) -> str:
    """`containerd://<hex>` (or cri-o://, docker://) -> `<hex>`; '' for an empty id."""
    for scheme in _RUNTIME_SCHEMES:
        if text.startswith(scheme):
            return text[len(scheme):]
    _, sep, rest = text.partition("://")
    return rest if sep else text


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """A Pod object (JSON as the API serves it) -> PodInfo; None when it has no UID. A field of
    the wrong type counts as absent."""
    meta = mapping(obj.get("metadata"))
    uid = text(meta.get("uid"))
    if not uid:
        return None
    status = mapping(obj.get("status"))
    containers: list[tuple[str, str]] = []
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in map(mapping, sequence(status.get(key))):
            cid = bare_container_id(text(cs.get("containerID")))
            if cid:
                containers.append((cid, text(cs.get("name"))))
    return PodInfo(
        uid=uid,
        namespace=text(meta.get("namespace")),
        name=text(meta.get("name")),
        labels=tuple(sorted((str(k), v) for k, v in mapping(meta.get("labels")).items()
                            if isinstance(v, str))),
        containers=tuple(containers),
        created=text(meta.get("creationTimestamp")),
        owners=controller_owners(meta),
        gpus=pod_gpus(obj),
    )


class PodWatcher(Reflector[PodInfo]):
    """Keeps a `PodIndex` of this node's pods up to date on a daemon thread.

    `configuration` says where the API is (tests point it at a stand-in); None means in-cluster
    configuration from `environ` (default: the process environment) and the mounted service
    account. `errors` counts failed calls; `available` is False when there is no API access at
    all; `reason` says why the last call failed or why there is no API.
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
        super().__init__(
            PODS_PATH,
            ApiCaller("pod list/watch", rbac="get/list/watch on pods",
                      without="GPU processes are attributed by pod UID only, without pod names, "
                              "pod UIDs on allocations or pod labels",
                      configuration=configuration, environ=environ),
            cap=MAX_PODS, thread_name="podgpu-podwatch",
            selector={"fieldSelector": f"spec.nodeName={self._node}"},
            watch_timeout_seconds=watch_timeout_seconds,
            watch_read_margin_seconds=watch_read_margin_seconds,
            max_backoff_seconds=max_backoff_seconds)
        self._store = PodStore()
        self._refused_logged = False

    @property
    def index(self) -> PodIndex:
        return self._store.index()

    def health(self) -> dict[str, object]:
        """The `pod_watch` entry of /health: status, pods kept, failed calls."""
        return {**self.api.health(), "pods": len(self._store)}

    def start(self, wait_seconds: float = 1.0) -> None:
        """Connect and start watching; wait up to `wait_seconds` for the first list."""
        if self.lacks_node(self._node, "NODE_NAME is not set, so the pod watch cannot be "
                                       "limited to this node; set it from spec.nodeName with "
                                       "the downward API"):
            return
        super().start(wait_seconds)

    def wait_synced(self, timeout: float) -> bool:
        return not self._node or super().wait_synced(timeout)

    def parse(self, obj: Mapping[str, Any]) -> PodInfo | None:
        return parse_pod(obj)

    def replace(self, items: list[PodInfo], more: int) -> None:
        self._store.replace(items, more)
        self._refused_logged = False
        if self._store.refused:
            self._log_refused(self._store.refused)

    def apply(self, event: str, item: PodInfo) -> None:
        if event == "DELETED":
            self._store.delete(item.uid)
        elif not self._store.put(item):
            self._log_refused(self._store.refused)

    def _log_refused(self, count: int) -> None:
        if not self._refused_logged:
            self._refused_logged = True
            log.warning("the API server lists more than %d pods on node %s (%d more); only %d "
                        "are kept (a node runs at most a few hundred: is the field selector "
                        "ignored?)", MAX_PODS, self._node, count, MAX_PODS)
