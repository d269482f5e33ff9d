"""One daemon worker thread per GPU, and a deadline on each cycle's reads.

NVML has no per-call timeout: a call into a wedged driver can block for minutes, and the thread
that made it cannot be interrupted. So each GPU is read on its own worker, the cycle waits for
all of them up to a deadline, and a GPU whose worker has not answered is reported as not
answering (and skipped while its call is still stuck) instead of stalling the other GPUs.

Workers are daemon threads, not a ThreadPoolExecutor: the executor joins its threads at exit, so
one stuck NVML call would keep podgpu from ever exiting on SIGTERM.

Decision record: docs/decisions/0009-per-gpu-workers.md.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

Job = tuple[Callable[[], Any], "Future[Any] | None"]
"""A queued job and the future it answers (None: posted, nobody waits)."""

Wait = Callable[[Mapping[Any, "Future[Any]"], float], None]
"""How `Workers.run` waits for one run's futures (key -> future): it returns once every one is
done or the seconds have passed, whichever comes first. Production waits on the real clock
(`wait_all`); tests pass one that returns as soon as every worker has answered or is parked in
an injected hang, so a deadline costs them no real time."""


def wait_all(futures: Mapping[Any, Future[Any]], seconds: float) -> None:
    """Wait until every future is done or `seconds` (real time) have passed."""
    end = time.monotonic() + seconds
    for fut in futures.values():
        left = end - time.monotonic()
        if left <= 0:
            break
        with contextlib.suppress(Exception):  # the caller reads each outcome itself
            fut.result(timeout=left)


class Workers:
    """`run(jobs, deadline)` runs each (key, fn) on that key's worker and waits up to `deadline`
    seconds in all; `stuck(key)` says whether a key's previous job has not returned yet."""

    def __init__(self, name: str = "podgpu-nvml", *, wait: Wait = wait_all) -> None:
        self._name = name
        self.wait = wait
        """How `run` waits; the NVML backend gives the workers it adopts from a warm-up
        (backends/nvml_ahead.py) its own."""
        self._queues: dict[Hashable, queue.SimpleQueue[Job | None]] = {}
        self._busy: dict[Hashable, tuple[Future[Any], float]] = {}

    def stuck(self, key: Hashable) -> float | None:
        """Seconds since the key's unfinished job started, or None when it is free."""
        busy = self._busy.get(key)
        if busy is None:
            return None
        if busy[0].done():
            del self._busy[key]
            return None
        return time.monotonic() - busy[1]

    def run(self, jobs: Iterable[tuple[K, Callable[[], T]]], deadline: float
            ) -> dict[K, Future[T]]:
        """Submit every job, wait until all are done or `deadline` seconds passed; the futures
        of those not done are left running and their keys report `stuck`."""
        from concurrent.futures import Future  # not for `post`: see there

        futures: dict[K, Future[T]] = {}
        start = time.monotonic()
        for key, fn in jobs:
            fut: Future[T] = Future()
            self._queue(key).put((fn, fut))
            self._busy[key] = (fut, start)
            futures[key] = fut
        self.wait(futures, deadline)
        return futures

    def post(self, key: Hashable, fn: Callable[[], object]) -> None:
        """Queue `fn` on the key's worker with no future: nobody waits for it and what it
        raises is dropped (it handles its own errors). The open ahead of the flags warms each
        GPU up this way (backends/nvml_ahead.py) before `concurrent.futures`, and the `logging`
        it loads, are imported."""
        self._queue(key).put((fn, None))

    def close(self) -> None:
        """Ask every worker to stop; a stuck one ends with the process (it is a daemon)."""
        for q in self._queues.values():
            q.put(None)
        self._queues.clear()

    def _queue(self, key: Hashable) -> queue.SimpleQueue[Job | None]:
        q = self._queues.get(key)
        if q is None:
            q = queue.SimpleQueue()
            self._queues[key] = q
            threading.Thread(target=_work, args=(q,), name=f"{self._name}-{key}",
                             daemon=True).start()
        return q


def _work(q: queue.SimpleQueue[Job | None]) -> None:
    while (item := q.get()) is not None:
        fn, fut = item
        if fut is None:  # posted: nobody waits for it, and the worker must live on for the rest
            with contextlib.suppress(BaseException):
                fn()
            continue
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fn())
        except BaseException as exc:  # handed to the caller through the future
            fut.set_exception(exc)
