"""GPU load generator with gpu-burn's square wave: busy for --on seconds, idle for --off seconds.

Busy phases run fp32 matrix products (like gpu_burn's SGEMM) with PyTorch or CuPy, whichever is
installed, on every selected GPU at once (one thread per GPU), synchronising every 10 products so a
busy phase ends on time. Between phases the matrices are freed, so FB_USED falls as it does with
gpu_burn's process exit. Prints a progress bar and the achieved TFLOP/s of each busy phase.
The recipe was measured on an H200 (bench/RESULTS.md).

Each phase boundary is also printed as one parseable line, e.g.
`burn phase=1 state=busy start=1764680000.123` / `... end=... gpu0_tflops=49.7`, for benchmarks
that line the load up with scraped metrics.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from podgpu.options import Option, go_flags, go_int, new_parser, resolve

DEFAULT_ON = 20.0
DEFAULT_OFF = 20.0
DEFAULT_SIZE = 8192
PRODUCTS_PER_SYNC = 10  # bounds the queue so "busy" ends on time
ENGINES = ("torch", "cupy")
_EPSILON = 1e-3  # seconds; below this a phase is over (float clocks never land exactly)


class Engine(Protocol):
    """Matrix products on one GPU."""

    def run_products(self, count: int) -> None:
        """Queue `count` size x size products and wait for them to finish."""

    def release(self) -> None:
        """Free the matrices (and the framework's cached blocks)."""


class _TorchEngine:
    def __init__(self, torch: Any, gpu: int, size: int) -> None:
        self._torch = torch
        self._dev = torch.device(f"cuda:{gpu}")
        self._a = torch.randn(size, size, device=self._dev, dtype=torch.float32)
        self._b = torch.randn(size, size, device=self._dev, dtype=torch.float32)
        self._c = torch.empty(size, size, device=self._dev, dtype=torch.float32)

    def run_products(self, count: int) -> None:
        for _ in range(count):
            self._torch.mm(self._a, self._b, out=self._c)
        self._torch.cuda.synchronize(self._dev)

    def release(self) -> None:
        del self._a, self._b, self._c
        with self._torch.cuda.device(self._dev):
            self._torch.cuda.empty_cache()


class _CupyEngine:
    def __init__(self, cp: Any, gpu: int, size: int) -> None:
        self._cp = cp
        self._gpu = gpu
        with cp.cuda.Device(gpu):
            rng = cp.random.default_rng(10)
            self._a = rng.random((size, size), dtype=cp.float32)
            self._b = rng.random((size, size), dtype=cp.float32)
            self._c = cp.empty((size, size), dtype=cp.float32)

    def run_products(self, count: int) -> None:
        with self._cp.cuda.Device(self._gpu) as dev:
            for _ in range(count):
                self._cp.matmul(self._a, self._b, out=self._c)
            dev.synchronize()

    def release(self) -> None:
        del self._a, self._b, self._c
        with self._cp.cuda.Device(self._gpu):
            self._cp.get_default_memory_pool().free_all_blocks()


EngineFactory = Callable[[int, int], Engine]
"""(gpu index, matrix size) -> an Engine with its matrices allocated on that GPU."""


@dataclass(frozen=True, slots=True)
class Framework:
    name: str
    device_count: int
    factory: EngineFactory


def find_framework(candidates: Sequence[str] = ENGINES) -> Framework | None:
    """The first of PyTorch / CuPy that is installed and sees a GPU; None when neither does."""
    for name in candidates:
        if importlib.util.find_spec(name) is None:
            continue
        mod: Any = importlib.import_module(name)
        if name == "torch":
            if not mod.cuda.is_available():
                continue
            return Framework("PyTorch " + str(mod.__version__), int(mod.cuda.device_count()),
                             functools.partial(_TorchEngine, mod))
        count = int(mod.cuda.runtime.getDeviceCount())
        if count:
            return Framework("CuPy " + str(mod.__version__), count,
                             functools.partial(_CupyEngine, mod))
    return None


def parse_gpus(text: str, count: int) -> list[int]:
    """'all' or '0,2' -> indices; ValueError naming the problem."""
    if text.strip().lower() == "all":
        return list(range(count))
    try:
        picked = [go_int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--gpus {text!r}: expected 'all' or indices like 0,1") from None
    bad = [g for g in picked if not 0 <= g < count]
    if not picked or bad:
        raise ValueError(f"--gpus {text!r}: this machine has GPUs 0..{count - 1}")
    return sorted(set(picked))


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected seconds, got {text!r}") from None


OPTIONS: tuple[Option, ...] = (
    Option(("--on",), "on", None, DEFAULT_ON, "seconds of full load per cycle", _seconds,
           metavar="S"),
    Option(("--off",), "off", None, DEFAULT_OFF, "idle seconds per cycle", _seconds,
           metavar="S"),
    Option(("--duration",), "duration", None, None, "stop after S seconds", _seconds,
           metavar="S", shown="run until interrupted"),
    Option(("--gpus",), "gpus", None, "all", "GPUs to load", metavar="all|0,1"),
    Option(("--size",), "size", None, DEFAULT_SIZE,
           "matrix size N for the N x N fp32 products", go_int, metavar="N"),
)
"""`podgpu burn`'s flags (podgpu.options, the engine every command uses)."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags -> the namespace `run` reads; ConfigError (exit 2) on a value that is no number."""
    parser = new_parser("podgpu burn", __doc__, OPTIONS,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    return argparse.Namespace(**resolve(parser.parse_args(go_flags(list(argv), OPTIONS)),
                                        OPTIONS, {}).values)


def main(argv: Sequence[str]) -> int:
    """`podgpu burn [flags]`."""
    return run(parse_args(argv))


class _Bar:
    """A one-line progress bar on a terminal; silent when output is not a terminal."""

    def __init__(self, out: TextIO, width: int = 30) -> None:
        self._out = out
        self._width = width
        self._tty = out.isatty()

    def show(self, phase: int, state: str, done: float, total: float, elapsed: float,
             duration: float | None) -> None:
        if not self._tty:
            return
        frac = min(1.0, done / total) if total > 0 else 1.0
        fill = int(frac * self._width)
        overall = f" | {elapsed:4.0f}/{duration:.0f} s" if duration else f" | {elapsed:4.0f} s"
        self._out.write(f"\r[{'#' * fill}{'-' * (self._width - fill)}] phase {phase} "
                        f"{state:4s} {done:4.1f}/{total:.0f} s{overall}  ")
        self._out.flush()

    def clear(self) -> None:
        if self._tty:
            self._out.write("\r" + " " * (self._width + 50) + "\r")


def _work(engine: Engine, gpu: int, counts: dict[int, int], deadline: float,
          clock: Callable[[], float], stop: threading.Event) -> None:
    """One GPU's busy phase: products in bounded batches until the deadline."""
    while clock() < deadline and not stop.is_set():
        engine.run_products(PRODUCTS_PER_SYNC)
        counts[gpu] += PRODUCTS_PER_SYNC


def burn(
    gpus: Sequence[int],
    factory: EngineFactory,
    *,
    on: float,
    off: float,
    duration: float | None,
    size: int,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    stop: threading.Event | None = None,
) -> list[dict[int, float]]:
    """Run the square wave; returns TFLOP/s per GPU for each busy phase."""
    stop = stop or threading.Event()
    bar = _Bar(out)
    start = clock()
    flop = 2.0 * size**3
    results: list[dict[int, float]] = []
    phase = 0

    def left() -> float:
        return float("inf") if duration is None else duration - (clock() - start)

    while not stop.is_set() and left() > _EPSILON:
        phase += 1
        busy_for = min(on, left())
        engines = {g: factory(g, size) for g in gpus}  # allocate before the clock starts
        counts = dict.fromkeys(gpus, 0)
        t0, w0 = clock(), wall()
        print(f"burn phase={phase} state=busy start={w0:.3f}", file=out, flush=True)
        deadline = t0 + busy_for

        threads = [threading.Thread(target=_work, args=(engines[g], g, counts, deadline, clock,
                                                        stop), daemon=True) for g in gpus]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.25)
                bar.show(phase, "busy", clock() - t0, busy_for, clock() - start, duration)
        busy = max(clock() - t0, 1e-9)
        for e in engines.values():
            e.release()
        tflops = {g: counts[g] * flop / busy / 1e12 for g in gpus}
        results.append(tflops)
        bar.clear()
        per_gpu = " ".join(f"gpu{g}_tflops={v:.1f}" for g, v in tflops.items())
        print(f"burn phase={phase} state=busy end={wall():.3f} seconds={busy:.1f} {per_gpu}",
              file=out, flush=True)
        idle_for = min(off, left())
        if idle_for <= _EPSILON or stop.is_set():
            break
        t1 = clock()
        print(f"burn phase={phase} state=idle start={wall():.3f}", file=out, flush=True)
        while not stop.is_set() and (remaining := idle_for - (clock() - t1)) > _EPSILON:
            sleep(min(0.25, remaining))
            bar.show(phase, "idle", clock() - t1, idle_for, clock() - start, duration)
        bar.clear()
    return results


def run(args: argparse.Namespace, *, candidates: Sequence[str] = ENGINES) -> int:
    """`podgpu burn`: 0 when done, 2 when no framework/GPU or bad flags, 130 on Ctrl-C."""
    if args.on <= 0 or args.off < 0 or args.size <= 0 or (args.duration is not None
                                                           and args.duration <= 0):
        print("podgpu burn: --on and --size must be > 0, --off >= 0, --duration > 0",
              file=sys.stderr)
        return 2
    framework = find_framework(candidates)
    if framework is None:
        print("podgpu burn: needs PyTorch or CuPy with a CUDA GPU; neither is available here "
              "(pip install torch, or cupy-cuda12x / cupy-cuda13x)", file=sys.stderr)
        return 2
    try:
        gpus = parse_gpus(args.gpus, framework.device_count)
    except ValueError as exc:
        print(f"podgpu burn: {exc}", file=sys.stderr)
        return 2
    print(f"podgpu burn: {framework.name} on GPUs {','.join(map(str, gpus))}, "
          f"{args.size}x{args.size} fp32 products, {args.on:g} s on / {args.off:g} s off"
          + (f", {args.duration:g} s" if args.duration else ""), flush=True)
    try:
        burn(gpus, framework.factory, on=args.on, off=args.off, duration=args.duration,
             size=args.size)
    except KeyboardInterrupt:
        return 130
    return 0
