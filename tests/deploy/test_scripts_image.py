"""scripts/image on a fresh machine: what it installs when its tools are missing. This
machine has them, so the test runs the script with a PATH that holds only the coreutils it needs
before that point and stand-ins for `id` and `apt-get` that record their calls (the fault
injected); the image build itself is exercised by scripts/check, which runs the real script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def arch_path(tmp: Path, binfmt: dict[str, str] | None) -> tuple[dict[str, str], Path]:
    """Every tool the script checks present (stand-ins that do nothing), an amd64 machine, and
    a binfmt_misc directory holding `binfmt` (None: not mounted)."""
    env, _ = fake_path(tmp, 0)
    bin_dir = Path(env["PATH"])
    for name in ("podman", "runc", "mmdebstrap", "newuidmap", "fuse-overlayfs"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "dpkg").write_text("#!/bin/sh\necho amd64\n")
    (bin_dir / "dpkg").chmod(0o755)
    for tool in ("grep", "uname"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    binfmt_dir = tmp / "binfmt_misc"
    if binfmt is not None:
        binfmt_dir.mkdir()
        (binfmt_dir / "status").write_text("enabled\n")
        for name, text in binfmt.items():
            (binfmt_dir / name).write_text(text)
    env["PODGPU_BINFMT_DIR"] = str(binfmt_dir)
    return env, binfmt_dir


QEMU_AARCH64 = ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                "flags: {flags}\noffset 0\nmagic 7f454c46\n")
"""/proc/sys/fs/binfmt_misc/qemu-aarch64 as Debian's qemu-user-static registers it."""


def run_arch(env: dict[str, str], platforms: str | None) -> subprocess.CompletedProcess[str]:
    if platforms:
        env = {**env, "PODGPU_IMAGE_PLATFORMS": platforms}
    return subprocess.run(["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_without_binfmt_misc_it_says_why_and_builds_its_own_architecture(tmp_path: Path) -> None:
    env, _ = arch_path(tmp_path, None)
    out = run_arch(env, None)
    assert "linux/arm64: not built: this amd64 machine cannot run its binaries: binfmt_misc " \
           "is not mounted" in out.stderr, out.stderr
    assert "architectures: amd64 (this machine: amd64)" in out.stderr


def test_asking_for_both_without_qemu_fails_with_the_fix(tmp_path: Path) -> None:
    env, _ = arch_path(tmp_path, {})
    out = run_arch(env, "linux/amd64,linux/arm64")
    assert out.returncode == 1
    assert "linux/arm64 was asked for" in out.stderr
    assert "install qemu-user-static and binfmt-support" in out.stderr, out.stderr


def test_a_qemu_entry_without_the_f_flag_is_not_enough(tmp_path: Path) -> None:
    env, _ = arch_path(tmp_path, {"qemu-aarch64": QEMU_AARCH64.format(flags="P")})
    out = run_arch(env, "linux/arm64")
    assert out.returncode == 1 and "lacks the F flag" in out.stderr, out.stderr


def test_with_qemu_registered_both_architectures_are_built(tmp_path: Path) -> None:
    """Control: the same stand-ins with the entry Debian registers: both architectures."""
    env, _ = arch_path(tmp_path, {"qemu-aarch64": QEMU_AARCH64.format(flags="PF")})
    out = run_arch(env, "linux/amd64,linux/arm64")
    assert "architectures: amd64 arm64 (this machine: amd64)" in out.stderr, out.stderr


def test_native_builds_only_this_machines_architecture_even_with_qemu(tmp_path: Path) -> None:
    """scripts/check's setting: QEMU registered, yet only amd64 on this amd64 machine."""
    env, _ = arch_path(tmp_path, {"qemu-aarch64": QEMU_AARCH64.format(flags="PF")})
    out = run_arch(env, "native")
    assert "linux/arm64: not built: PODGPU_IMAGE_PLATFORMS=native" in out.stderr, out.stderr
    assert "architectures: amd64 (this machine: amd64)" in out.stderr, out.stderr


FAKE_PODMAN = """#!/bin/sh
echo "$*" >> {log}
case "$*" in
  "image inspect --format {{{{.Size}}}} "*) echo 1000 ;;
  "image inspect --format {{{{.Config.User}}}} "*) echo 0:0 ;;
  "run -d "*) echo cid ;;
  "inspect --format {{{{.State.Running}}}} "*) echo true ;;
  "exec cid python3.13 -c "*) printf 'Uid:\\t0\\t0\\t0\\t0\\nCapEff:\\t0000000000000000\\nNoNewPrivs:\\t1\\n' ;;
esac
exit 0
"""
FAKE_CURL = """#!/bin/sh
case "$*" in
  */health) echo '{"status": "ok"}' ;;
  */metrics) for g in 0 1 2 3; do echo "DCGM_FI_DEV_GPU_UTIL{gpu=\\"$g\\"} 1"; done
             echo 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0"} 0' ;;
esac
"""


def whole_run(tmp: Path, binfmt: dict[str, str], platforms: str) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    """scripts/image to its end on stand-ins: podman records every call (and says every image
    exists, a stale :test-arm64 from an earlier run included), curl answers the smoke."""
    env, _ = arch_path(tmp, binfmt)
    bin_dir = Path(env["PATH"])
    log = tmp / "podman.log"
    (bin_dir / "podman").write_text(FAKE_PODMAN.format(log=log))
    (bin_dir / "curl").write_text(FAKE_CURL)
    for name in ("podman", "curl"):
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())  # not a wrapper script
    for tool in ("seq", "awk", "wc", "sleep", "tail", "date", "head", "sed"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    out = run_arch({**env, "PODGPU_IMAGE_BASE": "registry"}, platforms)
    return out, log.read_text().splitlines()


def test_an_architecture_not_built_is_never_tagged_or_listed(tmp_path: Path) -> None:
    """Without QEMU only amd64 is built: the stale :test-arm64 loses its tag and no
    :test-multiarch list is made (it would claim arm64)."""
    out, calls = whole_run(tmp_path, {}, "")
    assert out.returncode == 0, out.stderr
    assert "untag localhost/podgpu:test-arm64 localhost/podgpu:test-arm64" in calls, calls
    assert not [c for c in calls if c.startswith(("manifest create", "manifest add"))], calls
    assert not [c for c in calls if c.startswith("build") and "arm64" in c], calls
    assert "no manifest list localhost/podgpu:test-multiarch: only amd64 built" in out.stderr


def test_both_built_make_the_multiarch_list(tmp_path: Path) -> None:
    """Control: with QEMU both are built and smoke-tested, then listed; nothing is untagged."""
    out, calls = whole_run(tmp_path, {"qemu-aarch64": QEMU_AARCH64.format(flags="PF")},
                           "linux/amd64,linux/arm64")
    assert out.returncode == 0, out.stderr
    assert not [c for c in calls if c.startswith("untag")], calls
    assert "manifest create localhost/podgpu:test-multiarch" in calls
    adds = [c for c in calls if c.startswith("manifest add")]
    assert adds == [f"manifest add localhost/podgpu:test-multiarch "
                    f"containers-storage:localhost/podgpu:test-{a}" for a in ("amd64", "arm64")]
