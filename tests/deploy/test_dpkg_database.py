"""deploy/image/dpkg-database.py on a root filesystem unpacked from .deb files built here with
`dpkg-deb --build`, then trimmed as scripts/image trims: what it lists, what it leaves out, and
that dpkg itself (`dpkg-query --admindir`) reads the result. The built image's database is
checked by test_image_packages.py."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.deploy.render import ROOT

SCRIPT = ROOT / "deploy" / "image" / "dpkg-database.py"


def deb(tmp: Path, name: str, arch: str, files: dict[str, bytes],
        links: dict[str, str] | None = None, multi_arch: str = "") -> Path:
    """A package with these files (and symlinks), its control file and md5sums."""
    src = tmp / "src" / name
    for path, data in files.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(data)
    for path, target in (links or {}).items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).symlink_to(target)
    (src / "DEBIAN").mkdir()
    control = (f"Package: {name}\nVersion: 1.0-1\nArchitecture: {arch}\n"
               f"Maintainer: Test <test@example.org>\n"
               + (f"Multi-Arch: {multi_arch}\n" if multi_arch else "")
               + f"Description: {name} for the test\n second line of the description\n")
    (src / "DEBIAN" / "control").write_text(control)
    (src / "DEBIAN" / "md5sums").write_text("".join(
        f"{hashlib.md5(data).hexdigest()}  {path}\n" for path, data in files.items()))
    out = tmp / "debs" / f"{name}_1.0-1_{arch}.deb"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(src), str(out)],
                   check=True, capture_output=True)
    return out


def unpacked(tmp: Path, debs: list[Path]) -> Path:
    """As mmdebstrap --variant=extract leaves it: files unpacked, .debs in the apt cache."""
    root = tmp / "root"
    cache = root / "var/cache/apt/archives"
    cache.mkdir(parents=True)
    for d in debs:
        subprocess.run(["dpkg-deb", "-x", str(d), str(root)], check=True)
        (cache / d.name).write_bytes(d.read_bytes())
    return root


def test_lists_what_is_shipped_and_dpkg_reads_it(tmp_path: Path) -> None:
    debs = [
        deb(tmp_path, "libfoo1", "amd64", {"usr/lib/libfoo.so.1": b"foo"},
            links={"usr/share/doc/libfoo1": "foo-base"}, multi_arch="same"),
        deb(tmp_path, "foo-base", "all", {"usr/share/doc/foo-base/copyright": b"GPL"}),
        deb(tmp_path, "libgone0", "amd64", {"usr/lib/libgone.so.0": b"gone",
                                            "usr/share/doc/libgone0/copyright": b"MIT"}),
        deb(tmp_path, "tool", "amd64", {"usr/bin/tool": b"#!", "usr/share/tool/data": b"d",
                                        "usr/share/doc/tool/copyright": b"BSD"}),
    ]
    root = unpacked(tmp_path, debs)
    (root / "usr/lib/libgone.so.0").unlink()  # trimmed, as scripts/image drops SQLite
    (root / "usr/share/tool/data").unlink()   # one file of a package that stays
    out = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True,
                         text=True, check=True)
    assert "libgone0 1.0-1: none of its files is left, not listed" in out.stderr
    rows = subprocess.run(
        ["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-W",
         "-f", "${Package}:${Architecture} ${db:Status-Status}\n"],
        capture_output=True, text=True, check=True).stdout.split("\n")
    # foo-base ships nothing but the copyright libfoo1's documentation links to: kept
    assert sorted(r for r in rows if r) == ["foo-base:all installed",
                                            "libfoo1:amd64 installed", "tool:amd64 installed"]
    info = root / "var/lib/dpkg/info"
    assert (info / "libfoo1:amd64.list").is_file()  # Multi-Arch: same, as dpkg names it
    assert "/usr/lib/libfoo.so.1" in (info / "libfoo1:amd64.list").read_text().split()
    tool_list = (info / "tool.list").read_text().split()
    assert "/usr/bin/tool" in tool_list and "/usr/share/tool/data" not in tool_list
    assert (info / "tool.md5sums").read_text().split("\n")[:2] == [
        f"{hashlib.md5(b'#!').hexdigest()}  usr/bin/tool",
        f"{hashlib.md5(b'BSD').hexdigest()}  usr/share/doc/tool/copyright"]
    assert not (info / "libgone0.list").exists()
    assert not (root / "usr/share/doc/libgone0").exists()  # no licence for what is not shipped
    # dpkg's own file lookup answers from the written lists
    owner = subprocess.run(["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-S",
                            "/usr/bin/tool"], capture_output=True, text=True, check=True)
    assert owner.stdout.startswith("tool: /usr/bin/tool")


def test_no_debs_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True,
                         text=True)
    assert out.returncode != 0 and f"{tmp_path}/var/cache/apt/archives" in out.stderr
