"""Renders deploy/helm/podgpu with the real Helm (`helm template`, `helm lint`), as
tests/deploy/render.py renders the kustomize overlays.

Helm comes from scripts/check (scripts/helm install: .venv/bin/helm); a missing Helm fails the
test with the fix. Helm's own directories are pointed at a temporary one, so nothing is read
from or written to the user's home.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

from tests.deploy.render import ROOT, documents, tool

CHART = ROOT / "deploy" / "helm" / "podgpu"
_HOME = tempfile.mkdtemp(prefix="podgpu-helm-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
ENV = {**os.environ, "HELM_CACHE_HOME": f"{_HOME}/cache", "HELM_CONFIG_HOME": f"{_HOME}/config",
       "HELM_DATA_HOME": f"{_HOME}/data"}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=60,
                          env=ENV)


def template(values: dict[str, Any], *, release: str = "podgpu", namespace: str = "podgpu",
             chart: Path | str = CHART) -> subprocess.CompletedProcess[str]:
    """`helm template RELEASE CHART -n NAMESPACE -f values.json` (JSON is YAML)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(values, f)
    try:
        return helm("template", release, str(chart), "-n", namespace, "-f", f.name)
    finally:
        os.unlink(f.name)


def key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True)


@cache
def _rendered(k: str, release: str, namespace: str) -> tuple[dict[str, Any], ...]:
    out = template(json.loads(k), release=release, namespace=namespace)
    assert out.returncode == 0, f"helm template {k}: {out.stderr}"
    return documents(out.stdout)


def chart(values: dict[str, Any], *, release: str = "podgpu",
          namespace: str = "podgpu") -> tuple[dict[str, Any], ...]:
    """The chart's objects for `values` (cached per values, release and namespace)."""
    return _rendered(key(values), release, namespace)


def prerender(matrix: list[tuple[dict[str, Any], str, str]]) -> None:
    """Render many value sets at once (each `helm template` is its own process; two cores)."""
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda m: _rendered(key(m[0]), m[1], m[2]), matrix))
