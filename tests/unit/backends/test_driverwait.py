"""DriverWait around the real NvmlBackend, with the fake pynvml failing nvmlInit until the test
lets the driver "appear" (the fake injects the fault; the backend and the wrapper are real)."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from podgpu.backends.driverwait import DriverWait
from podgpu.backends.nvml import NvmlBackend
from podgpu.errors import BackendError
from podgpu.fields.catalog import BY_NAME
from podgpu.http.ready import FIRST_COLLECTION, driver_waiting, readiness
from tests.conftest import wait_for
from tests.fakes.fake_pynvml import DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

FIELDS = [BY_NAME["DCGM_FI_DEV_GPU_TEMP"]]


def test_waits_without_gpus_then_serves_them_when_the_driver_appears() -> None:
    nv = FakeNvml([FakeGpu("GPU-11111111-0000-0000-0000-000000000000")],
                  init_error=LIBRARY_NOT_FOUND)
    w = DriverWait(NvmlBackend(pynvml_module=nv), first_delay=0.01, max_delay=0.02)
    w.open()  # does not raise
    try:
        assert w.devices() == () and w.info() == {} and w.unavailable_fields() == {}
        assert w.read(FIELDS).samples == ()
        reason = w.waiting()
        assert reason is not None and "libnvidia-ml.so.1" in reason and "waiting" in reason
        wait_for(lambda: nv.calls["nvmlInit"] >= 3)  # it keeps trying
        assert w.waiting() is not None
        ran: list[str] = []
        w.when_ready(lambda: ran.append(threading.current_thread().name))
        assert ran == []
        nv.init_error = None  # the driver is installed
        wait_for(lambda: w.waiting() is None)
        wait_for(lambda: ran == ["podgpu-driver-wait"])
        (sample,) = w.read(FIELDS).samples
        assert sample.device.uuid == "GPU-11111111-0000-0000-0000-000000000000"
        assert w.info()["driver_version"] == nv.driver
    finally:
        w.close()
    assert nv.initialized == 0  # closed the NVML it opened


def test_a_driver_that_is_there_opens_at_once_without_a_thread() -> None:
    nv = FakeNvml([FakeGpu("GPU-22222222-0000-0000-0000-000000000000")])
    before = threading.active_count()
    w = DriverWait(NvmlBackend(pynvml_module=nv))
    w.open()
    try:
        assert w.waiting() is None and len(w.devices()) == 1
        assert not [t for t in threading.enumerate() if t.name == "podgpu-driver-wait"]
        assert threading.active_count() >= before
        ran: list[str] = []
        w.when_ready(lambda: ran.append(threading.current_thread().name))
        assert ran == [threading.current_thread().name]  # at once, on the caller's thread
    finally:
        w.close()


def test_a_missing_binding_is_not_waited_for() -> None:
    class NoBinding:
        name = "nvml"

        def open(self) -> None:
            try:
                raise ImportError("No module named 'pynvml'")
            except ImportError as exc:
                raise BackendError("the NVML backend needs nvidia-ml-py") from exc

    with pytest.raises(BackendError, match="nvidia-ml-py"):
        DriverWait(NoBinding()).open()  # type: ignore[arg-type]


def test_logs_once_a_minute_not_once_an_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """With log_every scaled down: many attempts, few lines (a ratio, not a timing). The
    retries are not delayed; the clock says each attempt came 5 ms after the one before."""
    nv = FakeNvml([FakeGpu("GPU-33333333-0000-0000-0000-000000000000")],
                  init_error=DRIVER_NOT_LOADED)
    caplog.set_level(logging.WARNING, logger="podgpu.backends.driverwait")
    w = DriverWait(NvmlBackend(pynvml_module=nv), first_delay=0.0, max_delay=0.0,
                   log_every=0.25, clock=lambda: nv.calls["nvmlInit"] * 0.005)
    w.open()
    try:
        wait_for(lambda: nv.calls["nvmlInit"] >= 120)
    finally:
        w.close()
    lines = [r.getMessage() for r in caplog.records]
    assert "waiting for the NVIDIA driver: NVIDIA driver not loaded" in lines[0]
    # what the probes see (http/ready.py, http/health.py): no /health/live route exists
    assert "/health/ready is 503" in lines[0] and "/health 200" in lines[0], lines[0]
    assert "/health/live" not in lines[0]
    still = [m for m in lines if m.startswith("still waiting")]
    assert 1 <= len(still) < nv.calls["nvmlInit"] / 10, (len(still), nv.calls["nvmlInit"])
    assert all("kernel module" in m for m in still)


def test_close_while_waiting_stops_retrying() -> None:
    nv = FakeNvml(init_error=LIBRARY_NOT_FOUND)
    w = DriverWait(NvmlBackend(pynvml_module=nv), first_delay=0.01, max_delay=0.01)
    w.open()
    wait_for(lambda: nv.calls["nvmlInit"] >= 2)
    w.close()
    # close() has joined the retry thread: with it gone, no nvmlInit call can come any more
    assert not [t for t in threading.enumerate() if t.name == "podgpu-driver-wait"]


def test_readiness_is_503_while_waiting_and_health_otherwise() -> None:
    body = {"status": "degraded", "reasons": [], "warnings": ["no GPU devices"]}
    status, ready = readiness(200, body, "waiting for the NVIDIA driver for 3 s (2 attempts): x")
    assert status == 503 and ready["status"] == "waiting"
    assert ready["reasons"] == ["waiting for the NVIDIA driver for 3 s (2 attempts): x"]
    assert readiness(200, body, None) == (200, body)
    assert readiness(503, {"status": "unhealthy", "reasons": ["stale"]}, None)[0] == 503


def test_ready_waits_for_a_snapshot_with_the_gpus_then_stays_ready() -> None:
    why: list[str | None] = ["waiting for the NVIDIA driver for 3 s (2 attempts): x"]
    devices: list[object] = []
    publisher = SimpleNamespace(current=None)
    check = driver_waiting(lambda: why[0], lambda: devices, publisher)  # type: ignore[arg-type]
    assert check() == why[0]
    why[0], devices[:] = None, ["GPU 0"]  # NVML opened: no snapshot with it yet
    assert check() == FIRST_COLLECTION
    publisher.current = SimpleNamespace(snapshot=SimpleNamespace(samples=()))
    assert check() == FIRST_COLLECTION  # a cycle from before the driver
    publisher.current = SimpleNamespace(snapshot=SimpleNamespace(samples=("GPU 0's sample",)))
    assert check() is None
    publisher.current = SimpleNamespace(snapshot=SimpleNamespace(samples=()))
    assert check() is None  # later snapshots are /health's business, not readiness'


def test_a_node_without_gpus_is_ready_once_nvml_answers() -> None:
    check = driver_waiting(lambda: None, lambda: (), SimpleNamespace(current=None))  # type: ignore[arg-type]
    assert check() is None


@pytest.mark.parametrize(("flag", "env", "waits"), [
    ([], {"KUBERNETES_SERVICE_HOST": "10.100.0.1"}, True),  # in a pod: wait
    ([], {}, False),  # a terminal: exit 1 as before
    (["--wait-for-driver", "never"], {"KUBERNETES_SERVICE_HOST": "10.100.0.1"}, False),
    (["--wait-for-driver", "always"], {}, True),
    ([], {"PODGPU_WAIT_FOR_DRIVER": "always"}, True),
])
def test_wait_for_driver_resolves_auto_to_in_kubernetes(flag: list[str], env: dict[str, str],
                                                         waits: bool) -> None:
    from podgpu.config.serve import parse_serve_args
    from podgpu.parts import make_backend

    settings = parse_serve_args(flag, env)
    assert settings.collect.wait_for_driver is waits
    backend = make_backend(settings)
    assert isinstance(backend, DriverWait) is waits
    assert backend.name == "nvml"


def test_wait_for_driver_rejects_other_values() -> None:
    from podgpu.config.serve import parse_serve_args
    from podgpu.errors import ConfigError

    with pytest.raises(ConfigError, match="wait-for-driver"):
        parse_serve_args(["--wait-for-driver", "sometimes"], {})
