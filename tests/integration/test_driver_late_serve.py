"""An agent that started before the NVIDIA driver (the driver wait) serving through the
driver's arrival: no GPUs and an empty driver_version first, then the GPUs and the driver's
version in podgpu_build_info without a restart, and the listed fields this node lacks logged once
the GPUs are known. The agent and NvmlBackend are real; the fake
pynvml fails nvmlInit until the test lets the driver appear (fault injection)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podgpu.agent import Agent, build_agent, run
from podgpu.backends.driverwait import DriverWait
from podgpu.backends.nvml import NvmlBackend
from podgpu.config import parse_serve_args
from podgpu.http.ready import FIRST_COLLECTION
from tests.conftest import http_get, wait_for
from tests.fakes.fake_pynvml import DRIVER_NOT_LOADED, FakeGpu, FakeNvml

UUID = "GPU-22222222-0000-0000-0000-000000000000"


def build_info(url: str) -> dict[str, str]:
    text = get(url + "/metrics")[1]
    line = next(x for x in text.splitlines() if x.startswith("podgpu_build_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


@contextlib.contextmanager
def serving_before_the_driver(nv: FakeNvml, *args: str) -> Iterator[Agent]:
    """`podgpu serve ARGS` in this process on the real NvmlBackend behind DriverWait, listening."""
    settings = parse_serve_args(["--address", "127.0.0.1:0", "--kubernetes=false", *args],
                                {"NODE_NAME": "test-node"})
    agent = build_agent(settings)
    agent.backend = DriverWait(NvmlBackend(pynvml_module=nv), first_delay=0.01, max_delay=0.05)
    listening = threading.Event()
    thread = threading.Thread(target=run, args=(agent,), daemon=True,
                              kwargs={"ready": lambda _a: listening.set()})
    thread.start()
    try:
        assert listening.wait(30)
        yield agent
    finally:
        agent.stop("test done")
        thread.join(30)


def get(url: str) -> tuple[int, str]:
    status, _headers, body = http_get(url)
    return status, body.decode()


def test_ready_only_once_metrics_hold_the_gpus() -> None:
    """A 2 s collect interval puts up to 2 s between NVML opening and the first snapshot with the
    GPU: /health/ready must not turn 200 in between (a Ready pod's first scrape has the GPUs)."""
    nv = FakeNvml([FakeGpu(UUID)], init_error=DRIVER_NOT_LOADED)
    with serving_before_the_driver(nv, "-c", "2000") as agent:
        status, body = get(agent.url + "/health/ready")
        assert status == 503 and json.loads(body)["status"] == "waiting"
        nv.init_error = None  # the driver is installed
        reasons: set[str] = set()
        while (answer := get(agent.url + "/health/ready"))[0] == 503:
            reasons.update(json.loads(answer[1])["reasons"])
            assert len(reasons) < 10, reasons
            time.sleep(0.02)
        assert answer[0] == 200
        status, text = get(agent.url + "/metrics")
        assert status == 200 and f'UUID="{UUID}"' in text  # ready, so the GPU is there
        assert all(r == FIRST_COLLECTION or "NVIDIA driver" in r for r in reasons), reasons


def test_build_info_and_unavailable_fields_once_the_driver_arrives(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.WARNING, "podgpu.agent")
    listed = tmp_path / "list.csv"
    listed.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n"
                      "DCGM_FI_PROF_SM_ACTIVE, gauge, SM active (GPM; this GPU has none)\n")
    nv = FakeNvml([FakeGpu(UUID, gpm_supported=False)], init_error=DRIVER_NOT_LOADED)
    with serving_before_the_driver(nv, "-c", "100", "-f", str(listed)) as agent:
        before = build_info(agent.url)
        assert before["driver_version"] == "" and before["backend"] == "nvml"
        assert "unavailable" not in caplog.text  # nothing is known of the GPUs yet
        nv.init_error = None  # the driver is installed
        after = wait_for(lambda: (lambda b: b if b["driver_version"] else None)(
            build_info(agent.url)), timeout=30, what="driver_version in podgpu_build_info")
        assert after["driver_version"] == nv.driver
        assert {k: v for k, v in after.items() if k != "driver_version"} == \
            {k: v for k, v in before.items() if k != "driver_version"}
        unavailable = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(unavailable) == 1 and "DCGM_FI_PROF_SM_ACTIVE" in unavailable[0]
        assert "DCGM_FI_DEV_GPU_TEMP" not in unavailable[0]
