"""The node podgpu runs on, as the Kubernetes API describes it: EC2 instance id and type, GPUs.

CloudWatch Container Insights names every GPU event with the node's `InstanceId` and
`InstanceType`. The CloudWatch agent reads them from the instance metadata service; podgpu reads
them from its own Node object instead (one GET on `/api/v1/nodes/<NODE_NAME>`, so RBAC grows by
`get` on nodes and nothing else): `spec.providerID` (`aws:///us-west-2a/i-0abc...`: the instance
id is its last segment) and the well-known label `node.kubernetes.io/instance-type`. The GPU
capacity (`status.capacity["nvidia.com/gpu"]`) comes with it.

The GET runs on its own daemon thread at start and every REFRESH_SECONDS after, never on the
collect path; `current()` returns the last answer (an empty `NodeObject` until the first one).
Without API access (no NODE_NAME, not in a pod) it logs one line and stays empty. A failed GET
(apiserver.py: CA, token, connection, answer) is counted, said once per reason and retried
within RETRY_SECONDS; `health()` is the `node` entry of /health's Container Insights part.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from podgpu.attribution.apijson import mapping, text
from podgpu.attribution.apiserver import ApiCaller, ApiUser
from podgpu.attribution.kubeapi import Connection, KubeConfig
from podgpu.peers.backoff import BackoffLoop

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
LEGACY_INSTANCE_TYPE_LABEL = "beta.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
REFRESH_SECONDS = 600.0
"""How often the Node is read again (its GPU capacity changes when the device plugin does)."""
RETRY_SECONDS = 60.0
"""How soon a failed read is tried again (at most; sooner when REFRESH_SECONDS is shorter)."""
GET_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class NodeObject:
    """What Container Insights needs from the Node. '' / None: not known (yet)."""

    name: str = ""
    instance_id: str = ""
    instance_type: str = ""
    gpu_capacity: int | None = None
    """`status.capacity["nvidia.com/gpu"]` (time-slicing replicas included), None if absent."""


def instance_id_of(provider_id: str) -> str:
    """`aws:///us-west-2a/i-0abc` -> `i-0abc`; '' when the id is not an AWS one."""
    if not provider_id.startswith("aws://"):
        return ""
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else ""


def _quantity(value: Any) -> int | None:
    """An integer resource quantity (`"8"`); None for anything else."""
    try:
        return int(str(value))
    except ValueError:
        return None


def parse_node(obj: Mapping[str, Any]) -> NodeObject:
    """A Node object (JSON as the API serves it) -> NodeObject; a field of the wrong type
    counts as absent."""
    meta = mapping(obj.get("metadata"))
    labels = mapping(meta.get("labels"))
    capacity = mapping(mapping(obj.get("status")).get("capacity"))
    itype = text(labels.get(INSTANCE_TYPE_LABEL)) or text(labels.get(LEGACY_INSTANCE_TYPE_LABEL))
    return NodeObject(
        name=text(meta.get("name")),
        instance_id=instance_id_of(text(mapping(obj.get("spec")).get("providerID"))),
        instance_type=itype,
        gpu_capacity=_quantity(capacity[GPU_RESOURCE]) if GPU_RESOURCE in capacity else None,
    )


class NodeLookup(ApiUser):
    """Reads this node's Node object on a daemon thread: at start, then every `refresh` s."""

    def __init__(self, node_name: str, *, configuration: KubeConfig | None = None,
                 environ: Mapping[str, str] | None = None,
                 refresh: float = REFRESH_SECONDS) -> None:
        self._node = node_name
        self._path = f"/api/v1/nodes/{quote(node_name, safe='')}"
        super().__init__(ApiCaller(f"Container Insights' GET {self._path}", rbac="get on nodes",
                                   without="InstanceId and InstanceType stay empty",
                                   configuration=configuration, environ=environ))
        self._current = NodeObject(name=node_name)
        self._conn: Connection | None = None
        self._done = threading.Event()
        retry = min(refresh, RETRY_SECONDS)
        self._loop = BackoffLoop(self._read, name="podgpu-node", first=retry, cap=retry,
                                 every=refresh)

    def current(self) -> NodeObject:
        return self._current

    def start(self, wait_seconds: float = 2.0) -> None:
        """Start reading; wait up to `wait_seconds` for the first answer (or failure)."""
        if self.lacks_node(self._node, "NODE_NAME is not set (set it from spec.nodeName with "
                                       "the downward API)"):
            return
        self._loop.start()
        self._done.wait(wait_seconds)

    def close(self) -> None:
        self._loop.stop()

    def _read(self) -> bool:
        """One GET, the attempt of the thread's BackoffLoop (podgpu.peers): True when it
        answered; a failure is counted and said. Never raises."""
        try:
            self._conn = self._conn or self.connect_or_end(self._loop)
            if self._conn is None:
                return False
            self._current = parse_node(self._conn.get_json(self._path,
                                                           timeout=GET_TIMEOUT_SECONDS))
            self.api.succeeded()
            return True
        except Exception as exc:  # counted and said; tried again
            self.api.failed(exc)
            return False
        finally:
            self._done.set()
