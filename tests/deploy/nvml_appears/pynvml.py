"""Stands in for nvidia-ml-py in a podgpu process started by the start-up contract test: the
fake NVML of tests/fakes/fake_pynvml.py, whose nvmlInit fails with "library not found" (what
NVML says before the driver's user-space library is mounted) until the wall-clock time in
PODGPU_TEST_NVML_AT, then answers with the GPUs named in PODGPU_TEST_NVML_UUIDS. A fault
injected at the NVML boundary; everything above it is the real podgpu.

Put this directory first on PYTHONPATH (and the repository root after it)."""

from __future__ import annotations

import os
import sys
import time

from tests.fakes.fake_pynvml import LIBRARY_NOT_FOUND, FakeGpu, FakeNvml, NVMLError

_AT = float(os.environ["PODGPU_TEST_NVML_AT"])
_UUIDS = os.environ["PODGPU_TEST_NVML_UUIDS"].split(",")


class _AppearingNvml(FakeNvml):
    def nvmlInit(self) -> None:
        if time.time() < _AT:
            self.calls["nvmlInit"] += 1
            raise NVMLError(LIBRARY_NOT_FOUND)
        super().nvmlInit()


sys.modules[__name__] = _AppearingNvml(
    [FakeGpu(u, minor=i, bus_id=f"00000000:{0x18 + i:02X}:00.0") for i, u in enumerate(_UUIDS)])
