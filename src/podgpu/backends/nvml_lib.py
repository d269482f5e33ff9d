"""The one place podgpu meets pynvml: loading it, classifying its errors, logging them once.

Everything NVML-specific in podgpu goes through the `backends/nvml*.py` modules, and those reach
pynvml only through a `Lib`. pynvml is imported lazily here, so the simulated node
and the unit tests run without it; tests hand in a fake module instead.

NVML return codes are part of NVML's ABI (nvml.h; NVML's API reference), so they are written
out here rather than looked up: a fake module only has to raise exceptions with `.value`.

Decision record: docs/decisions/0001-nvml-not-dcgm.md.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from podgpu.errors import BackendError

LOGGER = "podgpu.backends.nvml"
"""The NVML modules' logger. This module looks it up when it first logs, so that loading it for
the open ahead of the flags (podgpu/ahead.py) does not load `logging` on the way to the GPUs."""

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
NO_DATA = 21
ARGUMENT_VERSION_MISMATCH = 25
GPU_NOT_FOUND = 28
UNKNOWN = 999

LOST_CODES = frozenset({GPU_IS_LOST, UNKNOWN, GPU_NOT_FOUND, RESET_REQUIRED, UNINITIALIZED})
"""A whole-device call failing with one of these means the GPU is gone (off the bus, reset)."""

UNSUPPORTED_REASONS = {
    NOT_SUPPORTED: "not supported",
    NO_PERMISSION: "no permission",
    FUNCTION_NOT_FOUND: "not in this driver (function not found)",
    ARGUMENT_VERSION_MISMATCH: "driver/binding struct version mismatch",
    INVALID_ARGUMENT: "invalid argument (not available on this device)",
    NO_DATA: "no data",
}
"""Codes that say the same thing every cycle: the field is absent, not an error."""

INIT_CAUSES = {
    LIBRARY_NOT_FOUND: "NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver's user-space "
    "libraries are not installed or not mounted into this container (use the NVIDIA container "
    "runtime or mount the driver)",
    DRIVER_NOT_LOADED: "NVIDIA driver not loaded: the kernel module is not running on this host",
    NO_PERMISSION: "no permission to talk to the NVIDIA driver: /dev/nvidia* are not accessible "
    "to this process",
    LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (driver upgraded "
    "without a reboot)",
    UNKNOWN: "NVML reported Unknown Error at init: in containers this usually means access to "
    "/dev/nvidia* was lost (e.g. after systemctl daemon-reload); recreate the container",
}


def load(module: ModuleType | None) -> ModuleType:
    """The pynvml module to use: the injected one, else `import pynvml` (nvidia-ml-py)."""
    if module is not None:
        return module
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise BackendError(
            "the NVML backend needs nvidia-ml-py: pip install 'podgpu[nvml]' "
            f"(import pynvml failed: {exc})"
        ) from exc


class Lib:
    """A pynvml module plus the helpers every NVML submodule shares."""

    def __init__(self, module: ModuleType) -> None:
        self.m: Any = module
        self.error: type[BaseException] = module.NVMLError
        self._logged: set[tuple[str, str, str]] = set()
        self._log_lock = threading.Lock()

    @staticmethod
    def code(exc: BaseException) -> int:
        value = getattr(exc, "value", UNKNOWN)
        return value if isinstance(value, int) else UNKNOWN

    def is_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, self.error) and self.code(exc) in LOST_CODES

    @staticmethod
    def reason(code: int) -> str:
        return UNSUPPORTED_REASONS.get(code, f"NVML error {code}")

    @staticmethod
    def is_unsupported(code: int) -> bool:
        return code in UNSUPPORTED_REASONS

    def const(self, name: str) -> Any:
        """An NVML constant or function by name; None when this pynvml lacks it."""
        return getattr(self.m, name, None)

    def log_once(self, who: str, what: str, reason: str) -> None:
        """Log a recurring condition once per (device, field, reason); the key set is bounded
        by devices x fields x reasons."""
        key = (who, what, reason)
        with self._log_lock:
            if key in self._logged:
                return
            self._logged.add(key)
        import logging  # loaded long before: see LOGGER

        logging.getLogger(LOGGER).info("%s: %s unavailable: %s", who, what, reason)


def text(value: Any) -> str:
    """pynvml returns str or bytes depending on the function and version."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
