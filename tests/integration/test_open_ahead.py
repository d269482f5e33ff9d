"""`podgpu serve` opens NVML on its own thread while it loads the rest (podgpu/serve.py): the
first /metrics it answers still holds the GPU, its GPM (DCGM_FI_PROF_*) values come by the next
cycle at the latest, a bad input still exits 2 whatever NVML does, and NVML's own failure still
exits 1.

The process and its NVML backend are real; NVML is the fake of tests/fakes/fake_pynvml.py put in
place of nvidia-ml-py by tests/deploy/nvml_appears/, which answers from the wall-clock time in
PODGPU_TEST_NVML_AT on and says "library not found" before (the injected fault)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.harness import Serve, scrape, wait_for

ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-44444444-0000-0000-0000-000000000000"


def fake_nvml(answers_in: float) -> dict[str, str]:
    """The environment that makes the child's pynvml the fake one, answering in `answers_in` s."""
    path = os.pathsep.join([str(ROOT / "tests" / "deploy" / "nvml_appears"), str(ROOT),
                            *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"PYTHONPATH": path, "PODGPU_TEST_NVML_AT": str(time.time() + answers_in),
            "PODGPU_TEST_NVML_UUIDS": UUID, "NODE_NAME": "n"}


def serve(*args: str, answers_in: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", "serve", "-a", "127.0.0.1:0", *args],
                          env={**os.environ, **fake_nvml(answers_in)}, capture_output=True,
                          text=True, timeout=60)


def test_the_first_metrics_answered_hold_the_gpu_and_gpm_values_follow() -> None:
    """The first answer has the GPU. Its DCGM_FI_PROF_* series are there when 100 ms have
    passed since the open's GPM sample, else podgpu_field_unavailable says GPM's first window
    is not over; either way a cycle brings them as soon as it is, not an interval (here ten
    minutes) later."""
    with_serve = Serve(["-c", "600000", "--wait-for-driver", "never"], env=fake_nvml(0))
    try:
        def answer(want: bytes) -> bytes | None:
            assert with_serve.running(), with_serve.stop()[1]
            try:
                status, body = scrape(with_serve.url + "/metrics")
            except OSError:  # not listening yet
                return None
            assert status == 200
            return body if want in body else None

        first = wait_for(lambda: answer(b""), 30, "the first answer on /metrics", interval=0.01)
        later = wait_for(lambda: answer(b"DCGM_FI_PROF_GR_ENGINE_ACTIVE{"), 20,
                         "the DCP series", interval=0.05)
    finally:
        with_serve.stop()
    assert first is not None and later is not None
    assert f'UUID="{UUID}"'.encode() in first  # never an answer without the GPU
    if b"DCGM_FI_PROF_GR_ENGINE_ACTIVE{" not in first:
        assert b'field="DCGM_FI_PROF_GR_ENGINE_ACTIVE",reason="GPM\'s first 100 ms' in first
    assert f'UUID="{UUID}"'.encode() in later


def test_a_bad_input_exits_2_while_nvml_fails() -> None:
    for when in ("never", "always"):  # always: the driver wait's thread was started, and ends
        done = serve("-f", "/nonexistent/counters.csv", "--wait-for-driver", when,
                     answers_in=3600)
        assert done.returncode == 2, (when, done.stderr)
        assert "/nonexistent/counters.csv" in done.stderr.splitlines()[-1], done.stderr


def test_a_bad_input_exits_2_once_nvml_opened() -> None:
    done = serve("-f", "/nonexistent/counters.csv", "--wait-for-driver", "never", answers_in=0)
    assert done.returncode == 2, done.stderr
    assert "/nonexistent/counters.csv" in done.stderr.splitlines()[-1], done.stderr


def test_nvml_failing_without_the_wait_still_exits_1() -> None:
    done = serve("-c", "1000", "--wait-for-driver", "never", answers_in=3600)
    assert done.returncode == 1, done.stderr
    assert "libnvidia-ml.so.1" in done.stderr.splitlines()[-1], done.stderr


def test_the_open_waits_for_no_agent_catalog_or_listener(tmp_path: Path) -> None:
    """What is imported before pynvml is given to the open's thread is on the path to the
    GPUs' first GPM samples, and so to the first /metrics; the logs, the settings, the flags'
    tables, the agent, the field catalog, the NVML reading modules, the renderers and the
    listener load beside them (the backend modules the open runs load once the flags are
    parsed)."""
    record = tmp_path / "modules"
    path = os.pathsep.join([str(ROOT / "tests" / "integration" / "nvml_records"), str(ROOT),
                            *filter(None, [os.environ.get("PYTHONPATH")])])
    with Serve(["-c", "1000", "--wait-for-driver", "never"],
               env={"PYTHONPATH": path, "PODGPU_TEST_NVML_MODULES_TO": str(record)}):
        before_init = set(record.read_text().split())
    assert "podgpu.ahead" in before_init
    later = {"logging", "concurrent.futures", "podgpu.model", "podgpu.backends.base",
             "podgpu.logs", "podgpu.parts", "podgpu.settings", "podgpu.config",
             "podgpu.options", "podgpu.agent", "podgpu.backends.nvml",
             "podgpu.fields.catalog", "podgpu.fields.metriclist",
             "podgpu.backends.nvml_plan", "podgpu.backends.nvml_read", "podgpu.sinks.prometheus",
             "podgpu.http.server", "asyncio", "h11", "socket"}
    assert sorted(later & before_init) == []


SWITCHES = textwrap.dedent("""
    import gc
    import sys
    import podgpu.agent
    from podgpu import serve
    seen = []
    def state():
        return [sys.getswitchinterval(), gc.isenabled(), gc.get_freeze_count() > 0]
    def run(agent, *, open_backend, ready):  # the agent's run, as far as the start goes
        seen.extend(state())
        if sys.argv[1] == "serves":
            ready(agent)  # the port is bound, the first cycle published
            seen.extend(state())
        return 0
    podgpu.agent.run = run
    sys.setswitchinterval(0.004)  # not the default: what was set is what comes back
    code = serve.main(["--simulate", "1", "-a", "127.0.0.1:0"])
    print(code, *seen, *state())
""")


def start_state(how: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SWITCHES, how], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_start_switches_fast_and_collects_no_garbage_until_it_serves() -> None:
    """serve.py's `starting`: while the start overlaps driver waits with imports, threads switch
    every START_SWITCH_SECONDS and the cyclic garbage collector is off. Once the port serves, the
    interval set before comes back (a scrape under load then sees the interpreter as it was) and
    the collector is on again, what the start made frozen out of its reach. A process of its
    own: `serve.main` configures the process's logs."""
    assert start_state("serves") == ["0", "0.0005", "False", "False",  # starting
                                     "0.004", "True", "True",  # serving
                                     "0.004", "True", "True"]  # after
    # a start that ends before it serves: both back, nothing frozen
    assert start_state("fails") == ["0", "0.0005", "False", "False", "0.004", "True", "False"]
