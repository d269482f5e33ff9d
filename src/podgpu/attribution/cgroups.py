"""Host PID -> (pod UID, container id) from `/proc/<pid>/cgroup`.

NVML reports host PIDs (the driver ignores PID namespaces, so podgpu needs `hostPID: true` or a
mounted host /proc as `--proc-root`). The kubelet names a pod's cgroup `pod<uid>` under its QoS
cgroup; the container runtime names the leaf (NVML's API reference):

    systemd driver:  kubepods-burstable-pod<uid with _>.slice / cri-containerd-<id>.scope
                     (crio-<id>.scope for CRI-O, docker-<id>.scope for docker/cri-dockerd)
    cgroupfs driver: kubepods/burstable/pod<uid> / <id>

cgroup v1 has one line per hierarchy, v2 the single line `0::<path>`. Inside a private cgroup
namespace the path starts with `/../..`, so matching is by component, never by a fixed prefix.
Parsing (`parse_cgroup`) is separate from reading (`CgroupReader`) so it is tested on literal text.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from podgpu.files import FileReadError, read_bytes

log = logging.getLogger(__name__)

DEFAULT_PROC_ROOT = "/proc"
MAX_CGROUP_FILE_BYTES = 64 * 1024
"""Of `<pid>/cgroup` read (a real one is one line under cgroup v2, ~15 lines under v1)."""

_HEX_UUID = (
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32}"  # static (mirror) pods: the UID is an MD5 hex digest without dashes
)
# `pod<uid>` as a whole cgroupfs component, or as the last `-`-step of a systemd slice name.
_POD = re.compile(rf"^(?:.*-)?pod({_HEX_UUID})(?:\.slice)?$")
# The container leaf: runtime prefix (systemd scopes) or a bare id (cgroupfs).
_CONTAINER = re.compile(
    r"^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$"
)


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """The pod (and, when the leaf names one, the container) a process runs in.

    `pod_uid` is in the API's form (lower-case, dashes); `container_id` is the runtime's bare hex
    id (no `containerd://` scheme), or '' when the process sits in the pod cgroup itself.
    """

    pod_uid: str
    container_id: str = ""


def _pod_uid(component: str) -> str | None:
    m = _POD.match(component)
    if m is None:
        return None
    uid = m[1].replace("_", "-")
    return uid


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """Pod UID and container id from one cgroup path; None when the path is not in a pod."""
    parts = [p for p in path.split("/") if p and p != ".."]
    for i, part in enumerate(parts):
        uid = _pod_uid(part)
        if uid is None:
            continue
        container_id = ""
        if i + 1 < len(parts):
            m = _CONTAINER.match(parts[i + 1])
            if m is not None:
                container_id = m[1]
        return CgroupIdentity(uid, container_id)
    return None


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """Pod UID and container id from the text of a `/proc/<pid>/cgroup` file.

    Works on cgroup v1 (one `id:controllers:path` line per hierarchy), v2 (`0::path`) and hybrid
    files. The first line that names a container wins; otherwise the first that names a pod.
    Returns None for a process outside any pod (host daemons, plain docker containers).
    """
    found: CgroupIdentity | None = None
    for line in text.splitlines():
        fields = line.strip().split(":", 2)
        if len(fields) != 3:
            continue
        ident = parse_cgroup_path(fields[2])
        if ident is None:
            continue
        if ident.container_id:
            return ident
        if found is None:
            found = ident
    return found


class CgroupReader:
    """Reads `<proc_root>/<pid>/cgroup` for GPU processes, caching by PID between cycles.

    A PID is re-read when it was absent from the previous cycle (so a reused PID is read again
    once it reappears). A process that exited between NVML and the read is not an error; any other
    read failure (permission, I/O) counts in `errors` for `podgpu_collect_errors_total{source=
    "cgroups"}` and is logged once per errno.
    """

    def __init__(self, proc_root: str = DEFAULT_PROC_ROOT) -> None:
        self._root = proc_root
        self._cache: dict[int, CgroupIdentity | None] = {}
        self._logged: set[int] = set()
        self.errors = 0

    def resolve(self, pids: Iterable[int]) -> dict[int, CgroupIdentity]:
        """Identity per PID for those found in a pod; PIDs outside pods are left out."""
        wanted = set(pids)
        cache = {pid: self._cache[pid] for pid in wanted if pid in self._cache}
        for pid in wanted - cache.keys():
            cache[pid] = self._read(pid)
        self._cache = cache
        return {pid: ident for pid, ident in cache.items() if ident is not None}

    def _read(self, pid: int) -> CgroupIdentity | None:
        path = os.path.join(self._root, str(pid), "cgroup")
        try:
            text = read_bytes(path, MAX_CGROUP_FILE_BYTES).decode("utf-8", errors="replace")
        except FileReadError as exc:
            self._failed(path, exc)
            return None
        return parse_cgroup(text)

    def _failed(self, path: str, exc: FileReadError) -> None:
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            if not os.path.isdir(self._root):  # not "exited", the whole root is gone
                self.errors += 1
                if -1 not in self._logged:
                    self._logged.add(-1)
                    log.warning("%s is not a directory any more: GPU processes cannot be "
                                "attributed to pods (is the host /proc still mounted?)",
                                self._root)
            return  # exited since NVML listed it
        self.errors += 1
        code = exc.errno or 0
        if code not in self._logged:  # logged once per errno; 0: not a regular file, too big
            self._logged.add(code)
            hint = " (does podgpu run with hostPID and read access to /proc?)" if code in (
                errno.EACCES, errno.EPERM) else ""
            log.warning("cannot read %s: %s%s", path, exc, hint)
