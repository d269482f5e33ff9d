#!/usr/bin/env python3
"""Writes the dpkg database of a root filesystem that mmdebstrap unpacked without dpkg
(`--variant=extract`), so that scanners (Trivy, Grype, Syft, ECR, BuildKit's SBOM) see the
Debian packages the image ships. Run by scripts/image as mmdebstrap's last extract hook, on the
build machine, while the downloaded .deb files are still in ROOT/var/cache/apt/archives.

For each .deb with a file (not a directory) outside /usr/share/doc still in ROOT after the
trimming hooks, and for each package whose documentation directory such a package links to
(libstdc++6's is a link to gcc-14-base's, which ships nothing but its copyright), it writes:
- its control paragraph with `Status: install ok installed` to ROOT/var/lib/dpkg/status;
- ROOT/var/lib/dpkg/info/PKG.list (PKG:ARCH.list for Multi-Arch: same), the paths of its
  files and directories that are in ROOT, as dpkg lists them;
- PKG.md5sums, the package's own checksums of the files that are in ROOT.
A package whose files were all trimmed (libsqlite3-0 in the runtime base) is not listed, and
its copyright file goes with it.
Every other paragraph of an existing status file (mmdebstrap's merged-/usr placeholder, a
package with no files) is replaced. Prints one line per package listed.

Usage: dpkg-database.py ROOT
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path


def control(deb: Path) -> str:
    """The package's control file as dpkg-deb prints it (one paragraph, no trailing blank)."""
    out = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True,
                         check=True)
    return out.stdout.rstrip("\n")


def field(paragraph: str, name: str) -> str:
    for line in paragraph.splitlines():
        key, sep, value = line.partition(":")
        if sep and key == name:
            return value.strip()
    return ""


def members(deb: Path, what: str) -> tarfile.TarFile:
    data = subprocess.run(["dpkg-deb", what, str(deb)], capture_output=True, check=True).stdout
    return tarfile.open(fileobj=io.BytesIO(data))


def dpkg_path(name: str) -> str:
    """A tar member's name as dpkg's .list has it: absolute, "/." for the root."""
    path = "/" + name.removeprefix("./").rstrip("/")
    return "/." if path == "/" else path


def shipped(root: Path, path: str) -> bool:
    """Whether `path` is in the tree (a symlink in ROOT, e.g. /bin -> usr/bin, resolves inside
    it because merged /usr's links are relative)."""
    return path == "/." or (root / path.lstrip("/")).is_symlink() or (root / path.lstrip("/")).exists()


def main(root: Path) -> None:
    debs = sorted((root / "var/cache/apt/archives").glob("*.deb"))
    if not debs:
        raise SystemExit(f"dpkg-database.py: no .deb files under {root}/var/cache/apt/archives")
    info = root / "var/lib/dpkg/info"
    if info.exists():
        shutil.rmtree(info)
    info.mkdir(parents=True)
    packages = []
    for deb in debs:
        ctrl = control(deb)
        with members(deb, "--fsys-tarfile") as tar:
            entries = [(dpkg_path(m.name), m.isdir()) for m in tar.getmembers()]
        present = [(p, is_dir) for p, is_dir in entries if shipped(root, p)]
        packages.append((deb, ctrl, present))
    doc = root / "usr/share/doc"
    kept = {field(ctrl, "Package") for _, ctrl, present in packages
            if any(not is_dir and not p.startswith("/usr/share/doc/") for p, is_dir in present)}
    # a kept package whose documentation directory is a link to another's (libstdc++6 ->
    # gcc-14-base) ships that package's copyright: it is kept too
    kept |= {(doc / name).readlink().name for name in kept if (doc / name).is_symlink()}
    paragraphs = []
    for deb, ctrl, present in packages:
        name, arch = field(ctrl, "Package"), field(ctrl, "Architecture")
        if name not in kept:
            if (doc / name).is_symlink():
                (doc / name).unlink()
            else:
                shutil.rmtree(doc / name, ignore_errors=True)
            print(f"dpkg-database.py: {name} {field(ctrl, 'Version')}: none of its files is "
                  "left, not listed (its copyright file removed)", file=sys.stderr)
            continue
        present = [(p, d) for p, d in present if shipped(root, p)]
        key = f"{name}:{arch}" if field(ctrl, "Multi-Arch") == "same" else name
        (info / f"{key}.list").write_text("".join(f"{p}\n" for p, _ in present))
        with members(deb, "--ctrl-tarfile") as tar:
            sums = next((tar.extractfile(m) for m in tar.getmembers()
                         if m.name.removeprefix("./") == "md5sums"), None)
            lines = sums.read().decode().splitlines() if sums else []
        kept_sums = [ln for ln in lines if shipped(root, "/" + ln.split(None, 1)[1])]
        if kept_sums:
            (info / f"{key}.md5sums").write_text("".join(f"{ln}\n" for ln in kept_sums))
        head, _, rest = ctrl.partition("\n")
        paragraphs.append(f"{head}\nStatus: install ok installed\n{rest}\n")
        print(f"{name} {field(ctrl, 'Version')} {arch}")
    (root / "var/lib/dpkg/status").write_text("\n".join(paragraphs))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
