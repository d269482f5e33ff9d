"""A stand-in for nvidia-ml-py in `python -m bench.startup --fake-nvml` (no GPU needed): the fake
NVML of tests/fakes/fake_pynvml.py with one GPU (GPM supported, as on Hopper) whose nvmlInit
while NVML is down takes PODGPU_BENCH_NVML_INIT_S seconds (default 0.04, about what an H200 took) and every other
call PODGPU_BENCH_NVML_CALL_S (default 20 microseconds), each in a sleep that releases the GIL as
ctypes does during a real NVML call (so a thread making NVML calls while another imports waits
for the GIL after each, as it would on a GPU machine). A model of the GPU machine's start-up, not
a measurement of it.

Put this directory first on PYTHONPATH and the repository root after it."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

_INIT_S = float(os.environ.get("PODGPU_BENCH_NVML_INIT_S", "0.04"))
_CALL_S = float(os.environ.get("PODGPU_BENCH_NVML_CALL_S", "0.00002"))


class _SlowInitNvml(FakeNvml):
    def nvmlInit(self) -> None:
        if not self.initialized:  # NVML counts its inits: one while it is up only counts
            time.sleep(_INIT_S)
        super().nvmlInit()

    def _tick(self, name: str, handle: Any = None) -> Any:
        time.sleep(_CALL_S)
        return super()._tick(name, handle)


sys.modules[__name__] = _SlowInitNvml([FakeGpu("GPU-33333333-0000-0000-0000-000000000000")])
