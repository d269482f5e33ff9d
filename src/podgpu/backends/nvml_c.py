"""NVML's init through its C library, before pynvml is imported (podgpu/ahead.py calls it first
thing in `podgpu serve`). pynvml takes ~15 ms to import on an H100 (bench/RESULTS.md); NVML's
init and each GPU's first handle are waits in the driver that need neither it nor a setting.
This module imports nothing but threading (ctypes when called), so the open's thread starts
before anything else loads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

LIBRARY = "libnvidia-ml.so.1"
"""NVML's library by the name pynvml loads it on Linux: loaded once per process, whoever loads
it first."""


def c_init(library: str = LIBRARY) -> Callable[[], object] | None:
    """NVML's init through its C library, before pynvml is imported (ctypes releases the GIL
    while it waits), then each GPU's handle asked for on a daemon thread of its own
    ("podgpu-attach-N"): the first ask costs 7-9 ms in the driver, a later one (the warm-up's,
    through pynvml) nothing, and a GPU that hangs there holds only its own thread. Returns the
    init's shutdown, to call once; None when the library does not load or the init fails
    (pynvml's init then runs, and the backend's open says what is wrong). NVML counts its
    inits, so pynvml's own init later finds NVML up and takes no time."""
    import ctypes  # not at module level: a simulated start loads no ctypes

    try:
        nvml = ctypes.CDLL(library)
        init, shutdown = nvml.nvmlInit_v2, nvml.nvmlShutdown
        count, handle = nvml.nvmlDeviceGetCount_v2, nvml.nvmlDeviceGetHandleByIndex_v2
    except (OSError, AttributeError):
        return None
    if init() != 0:
        return None
    gpus = ctypes.c_uint(0)
    if count(ctypes.byref(gpus)) == 0:
        for index in range(gpus.value):
            threading.Thread(target=_attach, args=(handle, index), daemon=True,
                             name=f"podgpu-attach-{index}").start()
    return shutdown


def _attach(handle: Callable[[Any, Any], int], index: int) -> None:
    import ctypes  # loaded by c_init

    handle(ctypes.c_uint(index), ctypes.byref(ctypes.c_void_p()))  # the handle itself is unused
