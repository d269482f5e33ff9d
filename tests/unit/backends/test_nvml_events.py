"""XID events through the event thread, and the windows behind DCGM_EXP_XID_ERRORS_COUNT."""

from __future__ import annotations

from podgpu.backends.nvml import NvmlBackend
from podgpu.backends.nvml_events import WindowCounter
from podgpu.fields.catalog import BY_NAME
from tests.conftest import FakeClock, wait_for
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

WANT = [BY_NAME["DCGM_FI_DEV_XID_ERRORS"], BY_NAME["DCGM_EXP_XID_ERRORS_COUNT"]]


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-00000000-0000-0000-0000-000000000000"),
                     FakeGpu("GPU-11111111-0000-0000-0000-000000000000", minor=1)])


def test_xid_last_value_and_windowed_count_per_code() -> None:
    nv = two_gpus()
    b = NvmlBackend(pynvml_module=nv, xid_window_seconds=300.0)
    b.open()
    try:
        r0 = b.read(WANT)
        for s in r0.samples:
            assert s.values["DCGM_FI_DEV_XID_ERRORS"] == 0
            assert [(lv.labels, lv.value) for lv in s.labeled] == [
                ((("window_size_in_ms", "300000"),), 0)]
        nv.emit_xid(0, 43)
        nv.emit_xid(0, 79)
        nv.emit_xid(0, 43)
        assert b._events is not None
        events = b._events
        wait_for(lambda: sum(events.xid_counts(nv.gpus[0].uuid).values()) == 3)
        r1 = b.read(WANT)
    finally:
        b.close()
    s0, s1 = r1.samples
    assert s0.values["DCGM_FI_DEV_XID_ERRORS"] == 43  # the last one
    assert [(lv.field, lv.labels, lv.value) for lv in s0.labeled] == [
        ("DCGM_EXP_XID_ERRORS_COUNT", (("window_size_in_ms", "300000"), ("xid", "43")), 2),
        ("DCGM_EXP_XID_ERRORS_COUNT", (("window_size_in_ms", "300000"), ("xid", "79")), 1),
    ]
    assert s1.values["DCGM_FI_DEV_XID_ERRORS"] == 0  # the other GPU saw nothing
    assert [lv.value for lv in s1.labeled] == [0]


def test_event_thread_stops_on_close() -> None:
    nv = two_gpus()
    b = NvmlBackend(pynvml_module=nv)
    b.open()
    events = b._events
    assert events is not None
    b.close()
    assert not events._thread.is_alive()
    assert nv.calls["nvmlEventSetFree"] == 1


def test_gpu_without_xid_events_reports_why() -> None:
    nv = two_gpus()
    nv.gpus[1].event_types = 0x0
    b = NvmlBackend(pynvml_module=nv)
    b.open()
    try:
        r = b.read(WANT)
    finally:
        b.close()
    s0, s1 = r.samples
    assert s0.values["DCGM_FI_DEV_XID_ERRORS"] == 0
    assert "not supported" in s1.missing["DCGM_FI_DEV_XID_ERRORS"]
    assert "DCGM_EXP_XID_ERRORS_COUNT" in s1.missing and s1.labeled == ()


def test_window_counter_forgets_old_events() -> None:
    clock = FakeClock()
    w = WindowCounter(60.0, clock)
    w.add(43)
    clock.advance(30)
    w.add(43)
    w.add(79)
    assert w.counts() == {43: 2, 79: 1}
    clock.advance(31)
    assert w.counts() == {43: 1, 79: 1}
    clock.advance(60)
    assert w.counts() == {}
