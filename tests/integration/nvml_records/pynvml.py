"""Stands in for nvidia-ml-py in a podgpu process started by tests/integration/test_open_ahead.py:
the fake NVML of tests/fakes/fake_pynvml.py with one GPU. Importing it writes the names of the
modules loaded by then, one a line, to the file named in PODGPU_TEST_NVML_MODULES_TO: podgpu
imports the binding on the main thread while NVML's C init runs on the open's thread, and gives
it to that thread right after (ahead.OpenAhead), so these are what the GPUs' first GPM samples
waited for.

Put this directory first on PYTHONPATH (and the repository root after it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

Path(os.environ["PODGPU_TEST_NVML_MODULES_TO"]).write_text(
    "".join(f"{name}\n" for name in sorted(sys.modules)))
sys.modules[__name__] = FakeNvml([FakeGpu("GPU-55555555-0000-0000-0000-000000000000")])
