"""Runs the rendered DaemonSet's container as a local process: its exact args and env, with the
paths it mounts mapped to temporary directories (the "start-up contract").

Shared by tests/deploy/test_startup_contract.py and bench/prod_memory.py. What differs from the
cluster, and nothing else: mount paths point at temp dirs; `spec.nodeName` is "test-node"; the
service-account token is read from the stand-in's directory (incluster_shim.py); the caller may
add flags after the DaemonSet's (e.g. `--simulate 4` on a machine without a GPU, and the listen
address), which win because podgpu takes the last value of a repeated flag.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.render import ROOT, one

NODE_NAME = "test-node"
IMAGE_FILES = {  # what the Dockerfile puts into the image, by image path -> repository file
    "/etc/dcgm-exporter/default-counters.csv": ROOT / "etc" / "default-counters.csv",
    "/etc/dcgm-exporter/dcp-metrics-included.csv": ROOT / "etc" / "dcp-metrics-included.csv",
}
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass
class Launch:
    args: list[str]
    env: dict[str, str]
    mounts: dict[str, Path] = field(default_factory=dict)
    """container mountPath -> local directory standing in for it"""


def _configmap(objs: list[dict[str, Any]], name: str) -> dict[str, str]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    return dict(cm.get("data") or {})


def prepare(objs: list[dict[str, Any]], workdir: Path, *, pod_resources_dir: Path,
            proc_fixture: Path) -> Launch:
    """Map every volume of the DaemonSet to a local directory and resolve args and env."""
    spec = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec.get("volumes", ())}
    mounts: dict[str, Path] = {}
    for m in c.get("volumeMounts", ()):
        vol = volumes[m["name"]]
        if "hostPath" in vol and vol["hostPath"]["path"] == "/var/lib/kubelet/pod-resources":
            local = pod_resources_dir
        elif "hostPath" in vol and vol["hostPath"]["path"] == "/proc":
            local = workdir / "host-proc"
            shutil.copytree(proc_fixture, local)
        elif "configMap" in vol:
            local = workdir / m["name"]
            local.mkdir()
            for key, text in _configmap(objs, vol["configMap"]["name"]).items():
                (local / key).write_text(text)
        else:  # emptyDir, the EMF spool hostPath
            local = workdir / m["name"]
            local.mkdir()
        mounts[m["mountPath"]] = local
    env: dict[str, str] = {}
    for e in c.get("env", ()):
        if "value" in e:
            env[e["name"]] = _VAR.sub(lambda mt: env.get(mt.group(1), mt.group(0)), e["value"])
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            ds_meta = one(objs, "DaemonSet")["metadata"]
            fields = {"spec.nodeName": NODE_NAME,  # the downward API, as the kubelet fills it
                      "metadata.namespace": ds_meta.get("namespace", "default"),
                      "metadata.name": f"{ds_meta['name']}-x7k2p"}
            assert src["fieldRef"]["fieldPath"] in fields, src
            env[e["name"]] = fields[src["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            env[e["name"]] = _configmap(objs, ref["name"])[ref["key"]]
        else:
            raise AssertionError(f"env {e['name']}: unsupported source {src}")
    # The kubelet expands $(VAR) in args from the container's env; unknown ones stay as written.
    args = [_VAR.sub(lambda mt: env.get(mt.group(1), mt.group(0)), a) for a in c.get("args", ())]
    return Launch([map_path(a, mounts) for a in args], env, mounts)


def map_path(arg: str, mounts: dict[str, Path]) -> str:
    """A container path -> its local stand-in (mounts first, then files baked into the image)."""
    for mount in sorted(mounts, key=len, reverse=True):
        if arg == mount or arg.startswith(mount + "/"):
            return str(mounts[mount]) + arg[len(mount):]
    if arg in IMAGE_FILES:
        return str(IMAGE_FILES[arg])
    return arg
