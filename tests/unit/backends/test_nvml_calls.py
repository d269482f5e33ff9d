"""The NVML calls podgpu adapts to read a DCGM field as DCGM does (backends/nvml_plan.call):
restated from NVIDIA/DCGM dcgmlib/src/DcgmCacheManager.cpp, the field's read case, with the
installed nvidia-ml-py's own structs and constants."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pynvml
import pytest

from podgpu.backends import nvml_lib
from podgpu.backends.nvml_plan import call, convert, pick
from podgpu.fields.catalog import BY_NAME


class Lib(nvml_lib.Lib):
    """backends/nvml_lib.Lib over a module that holds only the given NVML names."""

    def __init__(self, **names: Any) -> None:
        module = ModuleType("pynvml_names")
        vars(module).update(names, NVMLError=pynvml.NVMLError)
        super().__init__(module)


def read(lib: Lib, field: str) -> Any:
    f = BY_NAME[field]
    return convert(f, pick(call(lib, "h", f.source.ref, f.source.arg), f.source.pick))


def test_cuda_compute_capability_is_packed_as_dcgm_packs_it() -> None:
    # DCGM: ccc = ((long long)major << 16) | minor
    lib = Lib(nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0))
    assert read(lib, "DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY") == 9 << 16


def test_affinity_words_ask_for_four_longs_and_the_node_scope() -> None:
    asked: list[tuple[Any, ...]] = []

    def cpu(h: Any, n: int) -> list[int]:
        asked.append(("cpu", n))
        return [0xFF, 0xF0, 0, 0]

    def mem(h: Any, n: int, scope: int) -> list[int]:
        asked.append(("mem", n, scope))
        return [1, 2, 0, 0]

    lib = Lib(nvmlDeviceGetCpuAffinity=cpu, nvmlDeviceGetMemoryAffinity=mem,
              NVML_AFFINITY_SCOPE_NODE=pynvml.NVML_AFFINITY_SCOPE_NODE)
    assert read(lib, "DCGM_FI_DEV_CPU_AFFINITY_1") == 0xF0
    assert read(lib, "DCGM_FI_DEV_MEM_AFFINITY_1") == 2
    assert asked == [("cpu", 4), ("mem", 4, pynvml.NVML_AFFINITY_SCOPE_NODE)]


def test_sram_threshold_is_read_from_the_versioned_struct() -> None:
    def status(h: Any, ref: Any) -> int:
        struct = ref._obj
        assert struct.version == pynvml.nvmlEccSramErrorStatus_v1
        struct.bThresholdExceeded = 1
        return 0

    lib = Lib(nvmlDeviceGetSramEccErrorStatus=status,
              c_nvmlEccSramErrorStatus_v1_t=pynvml.c_nvmlEccSramErrorStatus_v1_t,
              nvmlEccSramErrorStatus_v1=pynvml.nvmlEccSramErrorStatus_v1)
    assert read(lib, "DCGM_FI_DEV_THRESHOLD_SRM") == 1
    old = Lib(nvmlDeviceGetSramEccErrorStatus=status,
              NVML_ERROR_NOT_SUPPORTED=pynvml.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(pynvml.NVMLError) as exc:  # a binding without the struct
        read(old, "DCGM_FI_DEV_THRESHOLD_SRM")
    assert exc.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_bar1_is_mib_and_histogram_and_app_clocks_pick_their_parts() -> None:
    bar1 = SimpleNamespace(bar1Total=256 << 20, bar1Used=3 << 20, bar1Free=253 << 20)
    hist = pynvml.c_nvmlRowRemapperHistogramValues(640, 0, 0, 0, 0)
    clocks: dict[int, int] = {pynvml.NVML_CLOCK_GRAPHICS: 1755, pynvml.NVML_CLOCK_MEM: 2619}
    lib = Lib(nvmlDeviceGetBAR1MemoryInfo=lambda h: bar1,
              nvmlDeviceGetRowRemapperHistogram=lambda h: hist,
              nvmlDeviceGetApplicationsClock=lambda h, c: clocks[c],
              NVML_CLOCK_GRAPHICS=pynvml.NVML_CLOCK_GRAPHICS, NVML_CLOCK_MEM=pynvml.NVML_CLOCK_MEM)
    assert (read(lib, "DCGM_FI_DEV_BAR1_TOTAL"), read(lib, "DCGM_FI_DEV_BAR1_USED")) == (256, 3)
    assert read(lib, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX") == 640
    assert read(lib, "DCGM_FI_DEV_APP_SM_CLOCK") == 1755  # DCGM asks for NVML_CLOCK_GRAPHICS
    assert read(lib, "DCGM_FI_DEV_APP_MEM_CLOCK") == 2619
