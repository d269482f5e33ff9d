"""The kubelet PodResources v1 `List` client: the one module that talks gRPC.

One persistent channel on the kubelet's unix socket, polled on a background thread at the collect
interval, so a scrape or a collect cycle never waits on the kubelet (dcgm-exporter dials a new
connection and calls `List` per entity group per scrape, sharing the kubelet's 100 QPS budget).
The latest answer is kept as frozen `ContainerDevices` tuples of its GPU resources only, one per
container and resource (`flatten`); protobuf objects never leave here.

The call is made by grpcunary.py on h2 (sans-IO HTTP/2), not grpcio (+15 MiB for this one
unary call) nor grpclib (+4 MiB), because both check the 16 MiB receive limit only
after buffering the whole message: a 2 GiB length prefix cost +2.4 GiB. Here the length prefix
is checked before the message is read (RESOURCE_EXHAUSTED above the limit), the whole call runs
under its deadline, status codes are named in the reason, and each poll uses a fresh connection
on the unix socket (no HTTP/2 state kept between polls). The poll thread makes blocking calls;
podgpu's HTTP server loop never waits on the kubelet.

On failure the client drops the last answer (stale pod labels are worse than none), reports
`unavailable: <why>`, counts the error, closes the channel and retries with exponential backoff
from the poll interval up to `max_backoff_seconds`, so a kubelet restart (socket removed and
re-created) is picked up without waiting on gRPC's own reconnect backoff (up to 120 s).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.deviceids import DRA_GPU_RESOURCE, is_gpu_resource
from podgpu.attribution.grpcunary import GrpcError, unary
from podgpu.peers.backoff import BackoffLoop

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MAX_RECEIVE_BYTES = 16 * 1024 * 1024
"""Kubelet's own client limit (defaultPodResourcesMaxSize); gRPC's 4 MiB default is too small
for a large node."""
LIST_TIMEOUT_SECONDS = 10.0
"""Kubelet's defaultPodResourcesTimeout and dcgm-exporter's List timeout: the longest deadline."""
MIN_LIST_TIMEOUT_SECONDS = 1.0
DEFAULT_MAX_BACKOFF_SECONDS = 10.0
LIST_METHOD = "/v1.PodResourcesLister/List"
MIN_POLL_SECONDS = 0.1
"""At most 10 List calls a second, a tenth of the kubelet's 100 QPS budget for the whole node."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """The ids of one GPU resource that one container of one pod holds (the kubelet's
    `ContainerDevices` messages of that resource for that container, merged: `flatten`)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodResourcesState:
    """The client's latest view: entries from the last good `List`, or why there is none.

    `ok` is False until the first answer and after any failure; `errors` is cumulative.
    """

    ok: bool
    entries: tuple[ContainerDevices, ...] = ()
    reason: str = "no answer from the kubelet yet"
    errors: int = 0
    fetched_at: float = 0.0


DRA_GPU_DRIVER = "gpu.nvidia.com"
"""DRA allocations of this driver become ids of resource `dra/gpu.nvidia.com` (the device name)."""


def list_deadline(collect_interval: float) -> float:
    """The `List` deadline for a collect interval: two intervals, within 1..10 s.

    With a fixed 10 s deadline a hung `List` kept a deleted pod's labels and
    `kubelet: "ok"` for ~11 s at a 1 s interval. Together with `stale_after` it bounds how long
    an answer is trusted to a few intervals."""
    return min(LIST_TIMEOUT_SECONDS, max(MIN_LIST_TIMEOUT_SECONDS, 2.0 * collect_interval))


def stale_after(collect_interval: float) -> float:
    """Age past which the last `List` answer is not used: one collect interval (two polls at
    half the interval) plus the `List` deadline. Answers this old mean the poll thread is stuck
    or every call is timing out."""
    return collect_interval + list_deadline(collect_interval)


def pod_messages(answer: bytes | memoryview) -> Iterator[memoryview]:
    """The serialized `PodResources` messages of a serialized `ListPodResourcesResponse` (its
    field 1, repeated), one after another without copying them; other fields are skipped as
    protobuf skips unknown ones (https://protobuf.dev/programming-guides/encoding/). ValueError
    for an answer that is not that message."""
    view = memoryview(answer)
    i, end = 0, len(view)
    while i < end:
        tag, i = _varint(view, i)
        field, kind = tag >> 3, tag & 7
        if kind == 2:
            size, i = _varint(view, i)
            if i + size > end:
                raise ValueError("a field runs past the end of the answer")
            if field == 1:
                yield view[i:i + size]
            i += size
        elif field == 1 or kind not in (0, 1, 5):
            raise ValueError(f"field {field} has wire type {kind}")
        elif kind == 0:
            i = _varint(view, i)[1]
        else:
            i += 8 if kind == 1 else 4
    if i > end:
        raise ValueError("the answer ends inside a field")


def _varint(view: memoryview, i: int) -> tuple[int, int]:
    """The base-128 varint at `i` and the index after it."""
    value = shift = 0
    while i < len(view) and shift < 64:
        byte = view[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
    raise ValueError("the answer ends inside a varint" if i >= len(view) else "varint too long")


def flatten(pods: Iterable[Any], *, dra: bool = False,
            gpu: Callable[[str], bool] = is_gpu_resource) -> tuple[ContainerDevices, ...]:
    """`PodResources` messages -> the compact entries the attributor joins.

    Only GPU resources are kept (`gpu` says which: the attributor's `is_gpu_resource` with
    `--nvidia-resource-names`); other devices (NICs, FPGAs, hugepages ...) never reach the join.
    One entry per container and resource, its ids in the order listed, each once; the
    namespace, pod, container and resource strings are shared by the entries that repeat them.
    What stays resident after a 16 MiB answer is then proportional to the GPUs' holders and their
    ids, not to the message (bench/kubelet_answer.py). Init containers listed by the kubelet
    (restartable sidecars) are included like any other. With `dra`, each `dynamic_resources`
    device of NVIDIA's DRA driver is an id of resource `dra/gpu.nvidia.com` (the DRA device
    name such as `gpu-0`), so DRA GPUs are attributed like device-plugin GPUs; a claim shared by
    several containers lists the same device under each of them.
    """
    kept: dict[str, str | None] = {}  # resource name -> the one shared copy, None: not a GPU
    out: list[ContainerDevices] = []
    for pod in pods:
        names: tuple[str, str] | None = None
        for c in pod.containers:
            ids: dict[str, dict[str, None]] = {}  # resource -> its ids, in order, each once
            if dra:
                for claim in c.dynamic_resources:
                    for res in claim.claim_resources:
                        if res.driver_name == DRA_GPU_DRIVER and res.device_name:
                            ids.setdefault(DRA_GPU_RESOURCE, {})[res.device_name] = None
            for dev in c.devices:
                name = dev.resource_name
                resource = kept.get(name, "")
                if resource == "":
                    resource = kept[name] = name if gpu(name) else None
                if resource is not None:
                    ids.setdefault(resource, {}).update(dict.fromkeys(dev.device_ids))
            if ids:
                names = names or (pod.namespace, pod.name)
                container = c.name
                out.extend(ContainerDevices(names[0], names[1], container, resource, tuple(held))
                           for resource, held in ids.items())
    return tuple(out)


class PodResourcesClient:
    """Polls `List` on `socket_path` every `poll_interval_seconds` on a daemon thread."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        poll_interval_seconds: float = 1.0,
        max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS,
        timeout_seconds: float = LIST_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
        dra: bool = False,
        resource_names: Iterable[str] = (),
    ) -> None:
        """`resource_names`: `--nvidia-resource-names`, kept besides NVIDIA's own resources."""
        self._socket = socket_path
        self._dra = dra
        extra = frozenset(resource_names)
        self._gpu: Callable[[str], bool] = lambda name: is_gpu_resource(name, extra)
        interval = max(MIN_POLL_SECONDS, poll_interval_seconds)
        self._timeout = timeout_seconds
        self._clock = clock
        self._state = PodResourcesState(ok=False)
        self._first = threading.Event()
        # interval, 2x, 4x ... up to max_backoff_seconds after failures; the interval after an answer
        self._loop = BackoffLoop(lambda: self.poll_once().ok, name="podgpu-kubelet",
                                 first=interval, cap=max(interval, max_backoff_seconds),
                                 every=interval)
        self._calling = threading.Lock()  # one List at a time, whoever calls
        self._last: tuple[bytes, tuple[ContainerDevices, ...]] | None = None
        """The last answer's digest and entries: an unchanged answer is not parsed again."""
        self._logged_down = False

    @property
    def state(self) -> PodResourcesState:
        """The latest state; a plain attribute read, safe from any thread."""
        return self._state

    def start(self, wait_seconds: float = 1.0) -> None:
        """Start polling; wait up to `wait_seconds` for the first answer so the first snapshot
        is attributed when the kubelet is there. Never raises."""
        self._loop.start()  # once; a second start() only waits
        self._first.wait(wait_seconds)

    def close(self, timeout: float = 2.0) -> None:
        self._loop.stop()
        self._loop.join(timeout)  # a List still in flight ends by its deadline

    def poll_once(self) -> PodResourcesState:
        """One `List` call on the caller's thread; updates and returns the state."""
        errors = self._state.errors
        try:
            entries = self._call_list()
        except Exception as exc:  # translated here, at the one gRPC boundary
            why = _describe(exc, self._socket)
            if not self._logged_down:
                log.warning("kubelet PodResources unavailable: %s; GPU series continue without "
                            "pod labels and retry with backoff", why)
                self._logged_down = True
            self._state = PodResourcesState(ok=False, reason=why, errors=errors + 1)
        else:
            if self._logged_down:
                log.info("kubelet PodResources available again on %s", self._socket)
                self._logged_down = False
            self._state = PodResourcesState(
                ok=True, entries=entries, reason="", errors=errors, fetched_at=self._clock()
            )
        self._first.set()
        return self._state

    def _call_list(self) -> tuple[ContainerDevices, ...]:
        """One `List` on the calling thread (the poll thread, or a test's); calls never
        overlap."""
        # Imported only here, where they are used (DESIGN.md).
        pb: Any = importlib.import_module("podgpu.attribution.podresources_pb2")
        with self._calling:
            data = unary(self._socket, LIST_METHOD, pb.ListPodResourcesRequest().SerializeToString(),
                         timeout=self._timeout, max_bytes=MAX_RECEIVE_BYTES)
            digest = hashlib.blake2b(data, digest_size=16).digest()
            last = self._last
            if last is not None and last[0] == digest:  # the same answer as the last poll's:
                return last[1]  # its entries, not a second copy of them (16 MiB: ~30 MiB each)
            self._last = None  # the previous entries go before the new ones are built
            try:  # one pod's message decoded at a time: never the whole answer's objects
                entries = flatten(map(pb.PodResources.FromString, pod_messages(data)),
                                  dra=self._dra, gpu=self._gpu)
            except Exception as exc:  # ValueError here, protobuf's DecodeError
                raise GrpcError("INTERNAL", f"undecodable answer: {exc}") from None
            del data
            self._last = (digest, entries)
            return entries


_CONNECT_ERRORS: tuple[tuple[type[OSError], str], ...] = (
    (FileNotFoundError, "no such file (is the kubelet running, is the path mounted?)"),
    (ConnectionRefusedError, "connection refused"),
    # the socket is root-only; name the fix (e.g. an image-only swap run as non-root)
    (PermissionError, "permission denied: it is root-only, run podgpu as UID 0 (runAsUser: 0; "
     "every capability can stay dropped, docs/deploy.md)"),
)


def _describe(exc: BaseException, socket_path: str) -> str:
    """A short reason for `/health` and the log: `List failed: <STATUS>: <message>` for an
    answer with a gRPC status, `kubelet socket <path>: <why>` when it cannot be reached."""
    if isinstance(exc, GrpcError):
        text = exc.message.splitlines()
        return f"List failed: {exc.status}: {text[0] if text else ''}"[:300]
    for kind, short in _CONNECT_ERRORS:
        if isinstance(exc, kind):
            return f"kubelet socket {socket_path}: {short}"
    if isinstance(exc, OSError):
        return f"kubelet socket {socket_path}: {exc.strerror or exc}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]
