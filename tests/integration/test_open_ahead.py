"""`podgpu serve` opens NVML on its own thread while it loads the rest (podgpu/serve.py): the
first /metrics it answers still holds the GPU and its GPM (DCGM_FI_PROF_*) values, a bad input
still exits 2 whatever NVML does, and NVML's own failure still exits 1.

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


def test_the_first_metrics_answered_hold_the_gpu_and_its_gpm_values() -> None:
    with_serve = Serve(["-c", "1000", "--wait-for-driver", "never"], env=fake_nvml(0))
    try:
        def first_answer() -> tuple[int, bytes] | None:
            assert with_serve.running(), with_serve.stop()[1]
            try:
                return scrape(with_serve.url + "/metrics")
            except OSError:  # not listening yet
                return None

        answer = wait_for(first_answer, 30, "the first answer on /metrics", interval=0.01)
    finally:
        with_serve.stop()
    assert answer is not None
    status, body = answer
    assert status == 200
    assert f'UUID="{UUID}"'.encode() in body  # never an answer without the GPU
    assert b"DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in body  # the first cycle waited for GPM's pair


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
    import sys
    import podgpu.agent
    from podgpu import serve
    seen = []
    def run(agent, *, open_backend, ready):  # the agent's run, as far as the start goes
        seen.append(sys.getswitchinterval())
        ready(agent)  # the port is bound
        seen.append(sys.getswitchinterval())
        return 0
    podgpu.agent.run = run
    sys.setswitchinterval(0.004)  # not the default: what was set is what comes back
    code = serve.main(["--simulate", "1", "-a", "127.0.0.1:0"])
    print(code, *seen, sys.getswitchinterval())
""")


def test_the_start_switches_threads_fast_until_the_port_is_bound() -> None:
    """serve.py's START_SWITCH_SECONDS while the start overlaps driver waits with imports; the
    interval set before comes back once the port is bound (a scrape under load then sees the
    interpreter as it was). A process of its own: `serve.main` configures the process's logs."""
    done = subprocess.run([sys.executable, "-c", SWITCHES], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0.0005", "0.004", "0.004"]
