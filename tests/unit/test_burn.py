"""podgpu burn without a GPU: the square wave, TFLOP/s arithmetic, flag checks, no framework."""

from __future__ import annotations

import argparse
import io
import threading

import pytest

from podgpu import burn
from tests.conftest import FakeClock


class FakeEngine:
    """Each product takes `seconds` of the fake clock; records what happened."""

    def __init__(self, clock: FakeClock, lock: threading.Lock, log: list[str], gpu: int,
                 seconds: float = 0.01) -> None:
        self.clock, self.lock, self.log, self.gpu, self.seconds = clock, lock, log, gpu, seconds
        log.append(f"alloc{gpu}")

    def run_products(self, count: int) -> None:
        with self.lock:
            self.clock.advance(count * self.seconds)

    def release(self) -> None:
        self.log.append(f"free{self.gpu}")


def parse(*argv: str) -> argparse.Namespace:
    return burn.parse_args(argv)


def test_defaults_match_the_seed_pattern() -> None:
    a = parse()
    assert (a.on, a.off, a.duration, a.gpus, a.size) == (20.0, 20.0, None, "all", 8192)


def test_square_wave_phases_and_tflops() -> None:
    clock = FakeClock(0.0)
    lock = threading.Lock()
    log: list[str] = []
    out = io.StringIO()
    results = burn.burn(
        [0], lambda g, n: FakeEngine(clock, lock, log, g), on=2.0, off=3.0, duration=9.0,
        size=1000, out=out, clock=clock, wall=clock, sleep=clock.advance,
    )
    # 9 s = busy 2, idle 3, busy 2, idle 2 (cut by the duration)
    assert len(results) == 2
    # 2 s of 0.01 s products = 200 products of 2*1000^3 flop = 0.2 TFLOP/s
    assert results[0][0] == pytest.approx(0.2, rel=0.05)
    assert log == ["alloc0", "free0", "alloc0", "free0"]  # memory freed between busy phases
    lines = [line for line in out.getvalue().splitlines() if line.startswith("burn phase=")]
    assert lines[0] == "burn phase=1 state=busy start=0.000"
    assert "state=busy end=2.0" in lines[1] and "gpu0_tflops=0.2" in lines[1]
    assert lines[2] == "burn phase=1 state=idle start=2.000"
    assert lines[3] == "burn phase=2 state=busy start=5.000"
    assert clock() == pytest.approx(9.0, abs=0.02)


def test_all_selected_gpus_are_loaded_at_once() -> None:
    clock = FakeClock(0.0)
    lock = threading.Lock()
    log: list[str] = []
    results = burn.burn([0, 2], lambda g, n: FakeEngine(clock, lock, log, g), on=1.0, off=1.0,
                        duration=1.0, size=10, out=io.StringIO(), clock=clock, wall=clock,
                        sleep=clock.advance)
    assert set(results[0]) == {0, 2}
    assert sorted(log) == ["alloc0", "alloc2", "free0", "free2"]


@pytest.mark.parametrize(("text", "count", "expect"), [
    ("all", 3, [0, 1, 2]), ("0,1", 2, [0, 1]), ("1", 4, [1]), ("2,0,2", 3, [0, 2])])
def test_parse_gpus(text: str, count: int, expect: list[int]) -> None:
    assert burn.parse_gpus(text, count) == expect


@pytest.mark.parametrize("text", ["3", "x", "", "0,-1"])
def test_parse_gpus_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="--gpus"):
        burn.parse_gpus(text, 2)


def test_without_torch_or_cupy_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = burn.run(parse("--duration", "1"), candidates=("no_such_module_podgpu",))
    assert code == 2
    assert "needs PyTorch or CuPy" in capsys.readouterr().err


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert burn.run(parse("--on", "0")) == 2
    assert "--on" in capsys.readouterr().err
