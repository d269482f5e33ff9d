"""The image scripts/image built (localhost/podgpu:test), run with podman as scripts/image runs it.

scripts/check runs scripts/image before the tests, so the image and the containers.conf it writes
(runc, ulimits this host can grant) are there; a missing one fails with the fix, never skips.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IMAGE = os.environ.get("PODGPU_IMAGE_TAG", "localhost/podgpu:test")
CONTAINERS_CONF = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                   / "podgpu-image" / "containers.conf")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert CONTAINERS_CONF.exists(), f"{CONTAINERS_CONF} is missing: run scripts/image"
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    if check:
        assert out.returncode == 0, f"podman {' '.join(args)}: {out.stderr[-2000:]}"
    return out


def image_present() -> None:
    out = podman("image", "exists", IMAGE, check=False)
    assert out.returncode == 0, f"{IMAGE} is not built: run scripts/image"


def main_pid(name: str) -> int:
    """The container's first process as the host sees it (for its RSS)."""
    return int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip())
