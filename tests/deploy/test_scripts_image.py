"""scripts/image on a fresh machine (issue 22): what it installs when its tools are missing. This
machine has them, so the test runs the script with a PATH that holds only the coreutils it needs
before that point and stand-ins for `id` and `apt-get` that record their calls (the fault
injected); the image build itself is exercised by scripts/check, which runs the real script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.deploy.render import ROOT

SCRIPT = ROOT / "scripts" / "image"


def fake_path(tmp: Path, uid: int) -> tuple[dict[str, str], Path]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "mkdir", "cat"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    log = tmp / "apt.log"
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    # apt-get: record the call; `install` fails so the script stops right after it
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" = update ] && exit 0\nexit 100\n')
    for f in ("id", "apt-get"):
        (bin_dir / f).chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp), "XDG_CACHE_HOME": str(tmp / "cache")}
    return env, log


def test_missing_tools_are_installed_with_apt_get_as_root(tmp_path: Path) -> None:
    env, log = fake_path(tmp_path, 0)
    out = subprocess.run(["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 100, out.stderr  # apt-get's failure stops the script
    update, install = log.read_text().splitlines()
    assert update.startswith("update")
    words = install.split()
    assert words[:2] == ["install", "-y"] and "--no-install-recommends" in words
    assert {"podman", "runc", "mmdebstrap", "uidmap", "fuse-overlayfs"} <= set(words), install
    assert "installing podman runc mmdebstrap uidmap fuse-overlayfs" in out.stderr


def test_without_root_it_says_what_is_missing(tmp_path: Path) -> None:
    env, log = fake_path(tmp_path, 1000)
    out = subprocess.run(["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert "missing podman runc mmdebstrap newuidmap fuse-overlayfs" in out.stderr
    assert "needs root" in out.stderr
    assert not log.exists()


def test_the_real_tools_are_what_the_script_checks() -> None:
    """Control: on this machine every tool the script looks for is there (scripts/check put
    them there), so the stand-in PATH above is what made them missing."""
    for tool in ("podman", "runc", "mmdebstrap", "newuidmap", "fuse-overlayfs"):
        assert shutil.which(tool, path=os.environ.get("PATH")), tool
