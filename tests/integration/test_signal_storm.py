"""Storms of SIGHUP and SIGTERM against `podgpu serve`: they coalesce (one reload per burst that
finds none pending, one stop), never a traceback. Before, asyncio's wakeup socket filled and
each signal that did not fit printed "Exception ignored when trying to write to the signal
wakeup fd" with a traceback (51 in one run). The checks are counts on stderr and the exit."""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import ServeProcess

pytestmark = pytest.mark.integration
STORM = 5000


def test_a_sighup_storm_then_a_sigterm_storm_end_cleanly() -> None:
    serve = ServeProcess("--simulate", "2", "-c", "100")
    serve.wait_ready(timeout=30)
    for _ in range(STORM):
        os.kill(serve.proc.pid, signal.SIGHUP)
    status, _, _ = serve.get("/metrics")
    assert status == 200  # still serving after the storm
    for _ in range(STORM):
        try:
            os.kill(serve.proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # it stopped part-way through the storm
            break
    _, err = serve.wait_exit(60)
    # 0, or the default action of a SIGTERM that arrived once the stop was done and the
    # interpreter was exiting (it restores the default action of Python-level handlers then)
    assert serve.proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err and "wakeup fd" not in err, err[:3000]
    reloads = err.count("SIGHUP received")
    assert 1 <= reloads <= STORM
    assert err.count("stopping") == 1  # one graceful stop, however many SIGTERMs
