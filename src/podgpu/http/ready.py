"""/health/ready: readiness, which differs from /health (liveness) while the driver is awaited.

Why two paths: a node is labelled for GPUs before its NVIDIA driver is ready, and podgpu then
waits for it in-process (backends/driverwait.py). During that wait the pod must not be Ready (no
GPU series to scrape, and `kubectl rollout status` should not count it) but must not be
restarted either (a restart only adds back-off delay): /health, the liveness verdict, stays 200
while collection runs, and this readiness verdict is 503 with the reason until NVML answers.
Otherwise it is /health's verdict, so a node whose GPU fell off the bus stays Ready and keeps
exporting its XID and health series.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import TYPE_CHECKING, Any

from podgpu.http.publish import Publisher

if TYPE_CHECKING:
    from podgpu.model import Snapshot

READY_PATH = "/health/ready"


FIRST_COLLECTION = "the NVIDIA driver is ready; waiting for the first collection of its GPUs"


def driver_waiting(waiting: Callable[[], str | None], devices: Callable[[], Sized],
                   publisher: Publisher[Snapshot]) -> Callable[[], str | None]:
    """The `waiting` of add_ready_route for a backend behind DriverWait: its reason while NVML
    is not open, then FIRST_COLLECTION until a published snapshot holds the GPUs NVML found (so
    the first scrape of a Ready pod has them: they come one collect cycle after the driver),
    then None for good (a GPU lost later keeps the pod Ready, as /health decides)."""
    done = False

    def check() -> str | None:
        nonlocal done
        if done:
            return None
        why = waiting()
        if why is not None:
            return why
        current = publisher.current
        if len(devices()) and (current is None or not current.snapshot.samples):
            return FIRST_COLLECTION
        done = True
        return None

    return check


def readiness(status: int, body: dict[str, Any], waiting: str | None) -> tuple[int, dict[str, Any]]:
    """/health's (status, body) turned into the readiness answer: 503 while `waiting`."""
    if waiting is None:
        return status, body
    return 503, {**body, "status": "waiting", "reasons": [*body.get("reasons", ()), waiting]}
