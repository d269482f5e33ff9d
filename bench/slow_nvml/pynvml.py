"""A stand-in for nvidia-ml-py in `python -m bench.startup --fake-nvml` (no GPU needed): the fake
NVML of tests/fakes/fake_pynvml.py with one GPU (GPM supported, as on Hopper) whose nvmlInit
takes PODGPU_BENCH_NVML_INIT_S seconds (default 0.04, about what an H200 took) in a sleep that
releases the GIL, as ctypes does during a real NVML call. A model of the GPU machine's start-up,
not a measurement of it: the rest of NVML answers at Python speed.

Put this directory first on PYTHONPATH and the repository root after it."""

from __future__ import annotations

import os
import sys
import time

from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

_INIT_S = float(os.environ.get("PODGPU_BENCH_NVML_INIT_S", "0.04"))


class _SlowInitNvml(FakeNvml):
    def nvmlInit(self) -> None:
        time.sleep(_INIT_S)
        super().nvmlInit()


sys.modules[__name__] = _SlowInitNvml([FakeGpu("GPU-33333333-0000-0000-0000-000000000000")])
