"""Loaded by `python -m bench.startup_timeline` in the podgpu it starts (this directory first on
PYTHONPATH): one stderr line `TL <seconds since the parent's spawn> [<thread>] <event>` for the
start of chosen imports, each NVML call the first time and whenever it takes over 2 ms, the
open's thread (NVML's C init, pynvml's init, the GPUs' warm-up, then the backend's open), the
hand-over of the backend, the wait for the open, and each wiring step of
`podgpu.agent._serve` (the first cycle is `start_collecting`). It only wraps: nothing podgpu
does changes, apart from the few microseconds each line costs."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

T0 = float(os.environ.get("PODGPU_TIMELINE_T0", time.time()))
SLOW_CALL_SECONDS = 0.002
IMPORTS = frozenset({
    "podgpu.cli", "podgpu.ahead", "pynvml", "podgpu.logs", "podgpu.config", "podgpu.settings", "podgpu.parts", "podgpu.backends.nvml",
    "podgpu.agent", "asyncio", "podgpu.fields", "podgpu.accounting", "podgpu.sinks.live",
    "podgpu.http.server", "h11",
})
STEPS = ("build_agent", "wire_lists", "wire_publish", "wire_collect", "wire_http",
         "start_collecting", "listen_until_stopped")


def log(event: str) -> None:
    sys.stderr.write(f"TL {time.time() - T0:.4f} [{threading.current_thread().name}] {event}\n")


def on_import(event: str, args: tuple[Any, ...]) -> None:
    if event == "import" and args[0] in IMPORTS and args[0] not in seen:
        seen.add(args[0])
        log("import " + args[0])


def traced(name: str, fn: Callable[..., Any], always: bool) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.time()
        if always:
            log(name + " begins")
        try:
            return fn(*args, **kwargs)
        finally:
            took = time.time() - began
            if always:
                log(name + " ends")
            elif name not in seen or took > SLOW_CALL_SECONDS:
                seen.add(name)
                log(f"{name} {took * 1000:.1f} ms (began {began - T0:.4f})")
    return wrapper


def wrap_pynvml(module: ModuleType) -> None:
    for name in dir(module):
        fn = getattr(module, name)
        if name.startswith("nvml") and callable(fn) and not isinstance(fn, type):
            setattr(module, name, traced(name, fn, always=False))


def wrap_ahead(module: ModuleType) -> None:
    """OpenAhead's steps, in podgpu.ahead (podgpu.parts in an older tree)."""
    cls = getattr(module, "OpenAhead", None)
    if cls is None:
        return
    cls.begin = traced("the flags parsed, the backend handed over", cls.begin, always=True)
    cls.wait = traced("the wait for the open", cls.wait, always=True)
    cls._run = traced("the open's thread", cls._run, always=True)  # its own method: a probe's wrap


def wrap_c_init(module: ModuleType) -> None:
    module.c_init = traced("NVML's C init", module.c_init, always=True)  # type: ignore[attr-defined]


def wrap_warmup(module: ModuleType) -> None:
    module.Warmup.start = traced("the GPUs' warm-up start", module.Warmup.start, always=True)


def wrap_collect(module: ModuleType) -> None:
    """The first cycle runs on the loop's thread beside the listener's imports (an older tree
    runs it in `start_collecting`): its start and end, and the main thread's wait for it."""
    cls = module.CollectLoop
    cls.run_once = traced("a cycle", cls.run_once, always=True)
    if hasattr(cls, "wait_first"):
        cls.wait_first = traced("the wait for the first cycle", cls.wait_first, always=True)


def wrap_agent(module: ModuleType) -> None:
    for name in STEPS:  # an older tree may lack a step
        if hasattr(module, name):
            setattr(module, name, traced(name, getattr(module, name), always=True))


AFTER_LOAD: dict[str, Callable[[ModuleType], None]] = {
    "pynvml": wrap_pynvml, "podgpu.ahead": wrap_ahead, "podgpu.parts": wrap_ahead,
    "podgpu.backends.nvml_c": wrap_c_init,
    "podgpu.backends.nvml_ahead": wrap_warmup, "podgpu.collect": wrap_collect,
    "podgpu.agent": wrap_agent}


def wrapping(exec_module: Callable[[ModuleType], None], wrap: Callable[[ModuleType], None]
             ) -> Callable[[ModuleType], None]:
    def load_and_wrap(module: ModuleType) -> None:
        exec_module(module)
        wrap(module)
    return load_and_wrap


class Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it, then wraps the module once loaded."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in AFTER_LOAD:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module = wrapping(  # type: ignore[method-assign,assignment]
                    spec.loader.exec_module, AFTER_LOAD[fullname])
                return spec
        return None


seen: set[str] = set()
log("interpreter up")
sys.addaudithook(on_import)
sys.meta_path.insert(0, Finder())
