"""Each GPU's first GPM sample, taken before `podgpu serve`'s flags are parsed (podgpu/ahead.py
starts it).

NVML needs two GPM samples more than 100 ms apart (backends/nvml_gpm.py): the DCGM_FI_PROF_*
values come with the first cycle that reads 100 ms or more after the first sample (the cycle
after the first one when the first came sooner). `Warmup` takes each GPU's first sample on that
GPU's own worker (backends/deadline.py) as soon as NVML is up and pynvml is there; the NVML
backend's open adopts the workers and each GPU's first discovery adopts its stream. The workers
are the ones the backend reads on afterwards, so a GPU whose call hangs here stalls only that
GPU's discovery, which the open waits for under its usual deadline. Streams no discovery took
are freed once the open is done (`release`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from podgpu.backends.deadline import Workers
from podgpu.backends.nvml_gpm import GpmStream, gpm_support
from podgpu.backends.nvml_lib import Lib


class Warmup:
    """Each GPU's first GPM sample, taken on the GPU's worker before the backend exists."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock`: the streams' (tests pass a fake one)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._streams: dict[int, GpmStream] = {}
        self._workers: Workers | None = None
        self._released = False

    def start(self, module: Any) -> None:
        """On the open's thread, NVML up: one job per GPU on a new set of workers; returns
        without waiting for them."""
        lib = Lib(module)
        try:
            count = int(lib.m.nvmlDeviceGetCount())
        except lib.error:
            return  # the backend's open says why
        workers = Workers()  # the backend that adopts them sets how they wait
        for i in range(count):
            workers.post(i, partial(self._first_sample, lib, i))
        self._workers = workers

    def _first_sample(self, lib: Lib, index: int) -> None:
        with contextlib.suppress(Exception):  # discovery finds the same problem and says so
            handle = lib.m.nvmlDeviceGetHandleByIndex(index)
            if gpm_support(lib, handle) is not None:
                return
            stream = GpmStream(lib, handle, clock=self._clock)
            with self._lock:
                if not self._released:
                    self._streams[index] = stream
                    return
            stream.close()  # the open is over: nobody will take it

    def workers(self) -> Workers | None:
        """The workers the jobs run on, for the backend to adopt (once: None afterwards)."""
        workers, self._workers = self._workers, None
        return workers

    def take(self, index: int) -> GpmStream | None:
        """GPU `index`'s stream, its first sample taken, for its first discovery (on its
        worker, after the job); None when there is none, or after `release`."""
        with self._lock:
            return self._streams.pop(index, None)

    def release(self) -> None:
        """The open is done: free the streams nobody took, stop workers nobody adopted; a job
        still running frees its own stream when it ends."""
        with self._lock:
            self._released = True
            left, self._streams = list(self._streams.values()), {}
        for stream in left:
            stream.close()
        workers = self.workers()
        if workers is not None:
            workers.close()
