"""Debian's Prometheus 2.42 on loopback as a test peer (Prometheus' documentation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import free_port, http_get, wait_for


def ensure_installed() -> str:
    """The prometheus binary; installs Debian's package when missing and we are root (as CI is)."""
    path = shutil.which("prometheus")
    if path:
        return path
    if os.geteuid() != 0:
        raise AssertionError("prometheus is not installed; run scripts/check (it installs it)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "prometheus"], check=True, env=env,
                   timeout=900)
    path = shutil.which("prometheus")
    assert path, "apt-get installed prometheus but it is not on PATH"
    return path


def prometheus_ready(proc: subprocess.Popen[str], url: str) -> bool:
    """Whether the Prometheus at `url` answers /-/ready; AssertionError once `proc` has exited."""
    if proc.poll() is not None:
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"prometheus exited {proc.returncode}: {err[-2000:]}")
    try:
        return http_get(url + "/-/ready", timeout=1)[0] == 200
    except OSError:
        return False


def stop_prometheus(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, and SIGKILL if Prometheus has not exited 15 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], interval: str = "1s", *,
                 scrape_configs: str | None = None) -> None:
        """`scrape_configs`: YAML list items replacing the default gpu-metrics job (e.g. jobs with
        `scheme: https`, `tls_config` and `basic_auth`)."""
        self.binary = ensure_installed()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        jobs = scrape_configs or (
            "  - job_name: gpu-metrics\n"
            f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
        config.write_text(
            f"global: {{scrape_interval: {interval}, scrape_timeout: {interval}}}\n"
            "scrape_configs:\n" + jobs
        )
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={workdir / 'data'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_for(lambda: prometheus_ready(self.proc, self.url), timeout, "prometheus /-/ready",
                 interval=0.2)

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=5) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def stop(self) -> None:
        stop_prometheus(self.proc)
