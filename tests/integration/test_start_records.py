"""What `podgpu serve` imports before it answers defines no dataclass: creating one compiles each
of its generated methods (0.7-1.7 ms a class on CPython 3.11 and 3.12 against 0.1-0.25 ms for a
NamedTuple; bench/RESULTS.md "Records as NamedTuples"), and the start pays for every class it
creates. Records are `typing.NamedTuple`s; mutable state is a plain class with `__slots__`.

The process is real, over the fake NVML of tests/deploy/nvml_appears (answering at once); the
modules are read from its `-X importtime` lines up to its "listening on" line."""

from __future__ import annotations

import dataclasses
import importlib
import re

from tests.harness import Serve
from tests.integration.test_open_ahead import fake_nvml


def start_modules(*args: str) -> list[str]:
    """The modules imported before `serve ARGS` listened, in import order."""
    with Serve(["-c", "1000", "--wait-for-driver", "never", *args],
               env={**fake_nvml(0), "PYTHONPROFILEIMPORTTIME": "1"}) as agent:
        pass
    before = agent.stderr.split("listening on", 1)
    assert len(before) == 2, agent.stderr[-2000:]
    return re.findall(r"^import time:.*\|\s*([\w.]+)\s*$", before[0], re.MULTILINE)


def test_no_dataclass_before_the_first_answer() -> None:
    modules = [name for name in start_modules() if name.split(".")[0] == "podgpu"]
    assert {"podgpu.parts", "podgpu.settings", "podgpu.model.snapshot", "podgpu.agent",
            "podgpu.sinks.live.view", "podgpu.http.server"} <= set(modules)  # seen whole
    found = {f"{name}.{obj.__qualname__}"
             for name in modules
             for obj in vars(importlib.import_module(name)).values()
             if isinstance(obj, type) and obj.__module__ == name
             and dataclasses.is_dataclass(obj)}
    assert sorted(found) == []


def test_a_simulated_start_loads_no_pynvml() -> None:
    """The open ahead starts before the flags are parsed, but not for --simulate: ~1 MiB of
    binding and an NVML init a simulated node never uses."""
    binding = {"podgpu.backends.nvml_lib", "tests.fakes.fake_pynvml"}  # the fake pynvml's own
    modules = start_modules("--simulate", "2")
    assert "podgpu.sim.backend" in modules
    assert binding.isdisjoint(modules)
    assert binding <= set(start_modules())  # imported ahead on a start that reads NVML


LATER = {
    "difflib": "the 'closest known' hint for an unknown field (fields/catalog.py)",
    "hashlib": "the version of a followed file: no file is followed with the embedded list",
    "podgpu.fields.listfollow": "the follower of a list file: the embedded list has none",
    "podgpu.attribution.hpcjobs": "--hpc-job-mapping-dir, off by default",
    "podgpu.http.tlslayer": "TLS, loaded by the first TLS connection",
    "podgpu.sinks.live.schema": "the live view's TypedDicts: types only",
    "html": "the live page escapes without it (sinks/live/page.py)",
    "datetime": "the live page prints its time without it (sinks/live/page.py)",
    "shutil": "the terminal's width for --help, read without it (options.py)",
}


def test_a_default_start_leaves_what_it_needs_later_unimported() -> None:
    """What a default start (no TLS, no list file, no HPC jobs) only needs on a bad list, with a
    list file, with TLS or never, is imported where it is first needed, not before the first
    answer."""
    modules = set(start_modules())
    assert {"podgpu.http.server", "podgpu.sinks.live.page"} <= modules  # the start was seen whole
    assert sorted(LATER.keys() & modules) == []
