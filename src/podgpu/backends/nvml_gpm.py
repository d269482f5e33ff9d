"""DCGM profiling (DCP) ratios through NVML GPM, Hopper and newer (NVML's API reference).

One `GpmStream` per GPU or MIG GPU instance keeps a rolling pair of GPM samples: each cycle takes
one new sample and computes every requested metric between it and the previous cycle's sample in
one `nvmlGpmMetricsGet` call, then keeps the new sample as the next baseline. NVML needs the two
samples more than 100 ms apart. The stream takes its first sample when it is created (at open, or
when a MIG instance appears). A read that comes less than 100 ms after that first sample does not
wait for the rest: its metrics are absent with FIRST_WINDOW as the reason, and the first sample
stays the baseline of the next read, which has them. dcgm-exporter does the same with a
profiling field DCGM has not sampled yet: its value is blank, and a blank value is not exported
(docs/decisions/0024-first-answer-before-gpm.md). A later read that comes early (a cycle at a
100 ms interval, late after the one before) waits for the rest, so the series never flickers.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from podgpu.backends.nvml_lib import Lib

MIN_INTERVAL_SECONDS = 0.1
"""nvml.h: the two samples "should be greater than 100ms" apart."""
FIRST_WINDOW = "GPM's first 100 ms are not over: values from the next cycle"
"""The reason of every metric of a stream's first read when it comes within the 100 ms (the
caller does not log it: it is the start, not a fault)."""


def gpm_support(lib: Lib, handle: Any) -> str | None:
    """None when GPM works on this device, else why not (pre-Hopper, old driver, binding)."""
    query = lib.const("nvmlGpmQueryDeviceSupport")
    if query is None:
        return "this nvidia-ml-py has no GPM functions"
    try:
        support = query(handle)
    except lib.error as exc:
        return f"GPM query failed: {lib.reason(lib.code(exc))}"
    if not getattr(support, "isSupportedDevice", 0):
        return "GPM not supported on this GPU (NVML GPM needs Hopper or newer)"
    return None


class GpmStream:
    """Rolling GPM samples of one GPU (`gi_id` None) or one MIG GPU instance of `handle`."""

    def __init__(
        self,
        lib: Lib,
        handle: Any,
        gi_id: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._lib = lib
        self._handle = handle
        self._gi_id = gi_id
        self._clock = clock
        self._sleep = sleep
        self._samples: list[Any] = []
        self._computed = False  # no metrics read yet: a read within the first 100 ms is absent
        try:
            self._samples = [lib.m.nvmlGpmSampleAlloc(), lib.m.nvmlGpmSampleAlloc()]
            self._take(self._samples[0])
        except BaseException:
            self.close()
            raise
        self._taken_at = clock()

    @property
    def window_ends(self) -> float | None:
        """When (on the stream's clock) the stream's first 100 ms are over; None once a read has
        computed its metrics (later reads wait for what is left of their 100 ms instead)."""
        return None if self._computed else self._taken_at + MIN_INTERVAL_SECONDS

    def _take(self, sample: Any) -> None:
        if self._gi_id is None:
            self._lib.m.nvmlGpmSampleGet(self._handle, sample)
        else:
            self._lib.m.nvmlGpmMigSampleGet(self._handle, self._gi_id, sample)

    def metrics(self, metric_ids: Sequence[int]) -> dict[int, float | str]:
        """metric id -> value in NVML's unit (percent, MiB/s), or the reason it is absent.

        Within 100 ms of the stream's first sample, every metric is FIRST_WINDOW and no sample is
        taken; after that, a read sooner than 100 ms after the previous one waits for the rest.
        Raises the pynvml error when taking the sample fails (the caller decides whether the
        device is lost).
        """
        if not metric_ids:
            return {}
        wait = MIN_INTERVAL_SECONDS - (self._clock() - self._taken_at)
        if wait > 0:
            if not self._computed:
                return dict.fromkeys(metric_ids, FIRST_WINDOW)
            self._sleep(wait)
        prev, new = self._samples
        self._take(new)
        self._taken_at = self._clock()
        self._samples = [new, prev]  # the new sample is the next cycle's baseline
        self._computed = True
        m = self._lib.m
        get = m.c_nvmlGpmMetricsGet_t()
        get.version = m.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(metric_ids)
        get.sample1 = prev
        get.sample2 = new
        for i, mid in enumerate(metric_ids):
            get.metrics[i].metricId = mid
        try:
            m.nvmlGpmMetricsGet(get)
        except self._lib.error as exc:
            if self._lib.is_lost(exc):
                raise
            why = f"nvmlGpmMetricsGet failed: {self._lib.reason(self._lib.code(exc))}"
            return dict.fromkeys(metric_ids, why)
        out: dict[int, float | str] = {}
        for i, mid in enumerate(metric_ids):
            metric = get.metrics[i]
            if metric.nvmlReturn != 0:
                out[mid] = f"GPM metric {mid}: {self._lib.reason(int(metric.nvmlReturn))}"
            elif metric.value is None or math.isnan(metric.value):
                out[mid] = f"GPM metric {mid}: no value (NaN)"
            else:
                out[mid] = float(metric.value)
        return out

    def close(self) -> None:
        free = self._lib.const("nvmlGpmSampleFree")
        for sample in self._samples:
            with contextlib.suppress(Exception):  # freeing at shutdown must not raise
                free(sample)
        self._samples = []
