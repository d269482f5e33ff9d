"""What scanners and licence reviews read in the built image (localhost/podgpu:test, made by
scripts/image): its dpkg database lists the Debian package of every shared library it ships,
each with its copyright file; every shared library under /opt/podgpu belongs to a Python
distribution whose metadata is kept. The image's root filesystem is exported with podman and
read here; `dpkg-query --admindir` (the build machine's dpkg) parses its database.

Also the GPU Operator validation gate (deploy/kubernetes/components/gpu-operator) run in the
image: it waits for the operator's toolkit-ready file and exits once it is there.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath

from tests.deploy.podman import IMAGE, image_present, podman
from tests.deploy.render import compose, one
from tests.harness import wait_for

DPKG = PurePosixPath("var/lib/dpkg")
SITE = PurePosixPath("opt/podgpu/lib")


@cache
def rootfs() -> Path:
    """The image's files, exported once per session into a temporary directory."""
    image_present()
    tmp = Path(tempfile.mkdtemp(prefix="podgpu-rootfs-"))
    atexit.register(shutil.rmtree, tmp, True)  # ~70 MB: gone with the test session
    cid = podman("create", IMAGE).stdout.strip()
    try:
        tar_path = tmp / "rootfs.tar"
        podman("export", "-o", str(tar_path), cid)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp / "root", filter="tar")
        tar_path.unlink()
    finally:
        podman("rm", "-f", cid, check=False)
    return tmp / "root"


def normal(parts: list[str]) -> list[str]:
    out: list[str] = []
    for p in parts:
        if p == "..":
            if out:
                out.pop()
        elif p not in (".", ""):
            out.append(p)
    return out


def inside(root: Path, path: str) -> str:
    """`path` (absolute, in the image) with the image's own directory links resolved, e.g.
    /lib/x -> /usr/lib/x under merged /usr: the name the file has on disk (the last component
    is not followed: a library's own link is a file of its package)."""
    parts = normal(path.split("/"))
    cur: list[str] = []
    for i, part in enumerate(parts):
        cand = [*cur, part]
        for _ in range(40):  # a link loop ends here rather than hanging the test
            link = root.joinpath(*cand)
            if i == len(parts) - 1 or not link.is_symlink():
                break
            target = os.readlink(link)
            cand = normal((target if target.startswith("/") else "/".join(cur) + "/" + target)
                          .split("/"))
        cur = cand
    return "/" + "/".join(cur)


def dpkg_owners(root: Path) -> dict[str, str]:
    """Path in the image -> the package whose info/*.list names it (the image's database)."""
    owners = {}
    for lst in (root / DPKG / "info").glob("*.list"):
        pkg = lst.name.removesuffix(".list")
        for line in lst.read_text().splitlines():
            owners[inside(root, line)] = pkg
    return owners


def python_owners(root: Path) -> dict[str, str]:
    """Path in the image -> the Python distribution whose RECORD names it."""
    owners = {}
    for record in (root / SITE).glob("python3*/site-packages/*.dist-info/RECORD"):
        dist = record.parent.name.removesuffix(".dist-info")
        site = "/" + record.parent.parent.relative_to(root).as_posix()
        for line in record.read_text().splitlines():
            rel = line.split(",", 1)[0]
            if rel:
                owners["/" + "/".join(normal(f"{site}/{rel}".split("/")))] = dist
    return owners


def shared_libraries(root: Path) -> Iterator[str]:
    """Every file or link named *.so or *.so.N... in the image, by its name on disk (rglob does
    not descend into directory links such as merged /usr's /lib -> usr/lib)."""
    for path in root.rglob("*"):
        name = path.name
        if (name.endswith(".so") or ".so." in name) and not path.is_dir():
            yield "/" + path.relative_to(root).as_posix()


def owners_of_libraries(root: Path) -> tuple[dict[str, str], list[str]]:
    deb, py = dpkg_owners(root), python_owners(root)
    owned, unowned = {}, []
    for lib in sorted(shared_libraries(root)):
        owner = deb.get(lib) or (f"python:{py[lib]}" if lib in py else None)
        if owner:
            owned[lib] = owner
        else:
            unowned.append(lib)
    return owned, unowned


def test_every_shared_library_has_an_owner_in_the_images_own_records() -> None:
    root = rootfs()
    owned, unowned = owners_of_libraries(root)
    listing = "\n".join(f"{lib}  {owner}" for lib, owner in owned.items())
    print(listing)  # the list, for whoever reads the test log
    assert not unowned, f"shared libraries no package or distribution owns: {unowned}"
    assert len(owned) > 20, listing
    packages = set(owned.values())
    # The libraries the issue named (glibc, OpenSSL 3, expat, zlib, xz, bzip2, libffi, CPython
    # 3.13), by their Debian trixie package names.
    for pkg in ("libc6", "libssl3t64", "libexpat1", "zlib1g", "liblzma5", "libbz2-1.0",
                "libffi8", "libpython3.13-stdlib"):
        assert any(p.split(":")[0] == pkg for p in packages), (pkg, sorted(packages))


def test_the_control_finds_an_unowned_library(tmp_path: Path) -> None:
    """Control: a library no .list or RECORD names is reported, one named in a .list is not."""
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / DPKG / "info").mkdir(parents=True)
    (tmp_path / "usr/lib/libowned.so.1").write_bytes(b"")
    (tmp_path / "usr/lib/libstray.so").write_bytes(b"")
    (tmp_path / DPKG / "info" / "libowned1:amd64.list").write_text("/.\n/lib\n/lib/libowned.so.1\n")
    owned, unowned = owners_of_libraries(tmp_path)
    assert owned == {"/usr/lib/libowned.so.1": "libowned1:amd64"}
    assert unowned == ["/usr/lib/libstray.so"]


def installed(root: Path) -> dict[str, str]:
    """Package -> version as dpkg itself reads the image's database (only installed ones)."""
    out = subprocess.run(
        ["dpkg-query", f"--admindir={root / DPKG}", "-W",
         "-f", "${Package}\t${Version}\t${db:Status-Status}\n"],
        capture_output=True, text=True, check=True, timeout=60)
    rows = [ln.split("\t") for ln in out.stdout.splitlines()]
    assert all(status == "installed" for _, _, status in rows), rows
    return {name: version for name, version, _ in rows}


def test_dpkg_reads_the_database_and_every_package_keeps_its_copyright() -> None:
    root = rootfs()
    pkgs = installed(root)
    assert "usr-is-merged" not in pkgs  # mmdebstrap's placeholder, no Debian package
    # a package whose files scripts/image trims away entirely is not claimed, nor its copyright
    for trimmed in ("libsqlite3-0", "libdb5.3t64"):
        assert trimmed not in pkgs and not (root / "usr/share/doc" / trimmed).exists(), trimmed
    assert sorted(p.name for p in (root / "usr/share/doc").iterdir()) == sorted(pkgs)
    for pkg in pkgs:
        # a documentation directory may be a link to another package's (libstdc++6 ->
        # gcc-14-base): resolved inside the image
        target = root / inside(root, f"/usr/share/doc/{pkg}/copyright").lstrip("/")
        assert target.is_file() and target.stat().st_size > 0, (pkg, target)
    # every library owner is a listed package: the .list files and the status agree
    owned, _ = owners_of_libraries(root)
    for owner in set(owned.values()):
        if not owner.startswith("python:"):
            assert owner.split(":")[0] in pkgs, owner


def test_python_distributions_keep_their_metadata() -> None:
    root = rootfs()
    dists = {}
    for meta in (root / SITE).glob("python3*/site-packages/*.dist-info/METADATA"):
        head = meta.read_text(errors="replace").split("\n\n", 1)[0]
        fields = dict(ln.split(": ", 1) for ln in head.splitlines() if ": " in ln)
        dists[fields["Name"].lower()] = fields["Version"]
    lock = (Path(__file__).resolve().parents[2] / "requirements.lock").read_text()
    pinned = {ln.split("==")[0].strip().lower() for ln in lock.splitlines()
              if "==" in ln and not ln.lstrip().startswith("#")}
    assert "podgpu" in dists
    missing = {p for p in pinned if p.replace("_", "-") not in
               {d.replace("_", "-") for d in dists}}
    assert not missing, missing


# --- the GPU Operator validation gate, in the image ---------------------------------------
def gate_command() -> list[str]:
    pod = one(list(compose(("namespace", "gpu-operator"))), "DaemonSet")["spec"]["template"][
        "spec"]
    (gate,) = pod["initContainers"]
    return [*gate["command"], *gate["args"]]


class Gate:
    """The rendered gate running in the image against a stand-in /run/nvidia."""

    def __init__(self, run_nvidia: Path) -> None:
        image_present()
        self.name = f"podgpu-gate-{run_nvidia.parent.name[-12:]}".replace("_", "-").lower()
        cmd = gate_command()
        podman("run", "-d", "--name", self.name, "--read-only", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges", "-e", "NVIDIA_VISIBLE_DEVICES=void",
               "-v", f"{run_nvidia}:/run/nvidia:ro", "--entrypoint", cmd[0], IMAGE, *cmd[1:])

    def log(self) -> str:
        out = podman("logs", self.name)
        return out.stdout + out.stderr

    def state(self) -> str:
        return podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                      self.name).stdout.strip()

    def says(self, words: str) -> None:
        wait_for(lambda: words in self.log(), timeout=60, what=f"the gate saying {words!r}")
        assert self.state().startswith("running"), (self.state(), self.log())

    def exits(self) -> str:
        return str(wait_for(lambda: self.state() if self.state().startswith("exited") else "",
                            timeout=60, what="the gate to exit"))

    def remove(self) -> None:
        podman("rm", "-f", self.name, check=False)


def validations(tmp_path: Path) -> Path:
    d = tmp_path / "run-nvidia" / "validations"
    d.mkdir(parents=True)
    return d


def test_the_gate_passes_a_validated_host_driver(tmp_path: Path) -> None:
    d = validations(tmp_path)
    (d / "driver-ready").write_text("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n")
    (d / "toolkit-ready").write_text("")
    gate = Gate(d.parent)
    try:
        assert gate.exits() == "exited 0", gate.log()
        assert "starting podgpu" in gate.log()
    finally:
        gate.remove()


def test_the_gate_waits_through_a_driver_upgrade_until_the_toolkit_is_revalidated(
        tmp_path: Path) -> None:
    """A containerized driver being upgraded: toolkit-ready and driver-ready are left from
    before, .driver-ctr-ready was deleted by the old driver's preStop. The gate waits for the
    new driver, then for a toolkit-ready written after it, and only then exits 0."""
    d = validations(tmp_path)
    (d / "driver-ready").write_text("IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n")
    (d / "toolkit-ready").write_text("")
    old = time.time() - 3600
    os.utime(d / "toolkit-ready", (old, old))
    gate = Gate(d.parent)
    try:
        gate.says(".driver-ctr-ready: the GPU Operator's driver container has not loaded")
        (d / ".driver-ctr-ready").write_text("")  # the new driver's startup probe
        gate.says("toolkit-ready newer than .driver-ctr-ready")
        (d / "toolkit-ready").unlink()  # the validator re-validates: delete, then write
        gate.says("has not validated the driver and container toolkit on this node yet")
        (d / "toolkit-ready").write_text("")
        assert gate.exits() == "exited 0", gate.log()
    finally:
        gate.remove()
