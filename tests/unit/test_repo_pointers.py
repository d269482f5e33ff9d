"""The repository explains itself: no text in it points at something a clone does not have.

A pointer is a tracker number ("issue" and a number), a numbered rule of an outside style guide,
an outside reference file or a folder beside the checkout.
Where such a pointer carried a fact, the fact is written out instead (decisions live in
docs/decisions/). Links to public trackers stay allowed: GitHub URLs and `owner/repo#N`.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "docs", "bench", "deploy", "scripts", "README.md")
SKIPPED_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}

# Assembled from parts so this file does not match itself.
POINTER = re.compile("|".join([
    r"\.\./" + "shared",
    "STY" + r"LE( rule|\.md)",
    "refer" + r"ence/[a-z-]+\.md",
    r"\b[Ii]ss" + r"ues? #?[0-9]+\b",
    r"\b[Rr]efer" + r"ence ([a-z-]+\.md )?§",  # a section of an outside reference file
]))
# Public links are fine: any URL, and GitHub's owner/repo#N shorthand.
ALLOWED = re.compile(r"https?://\S+|\b[\w.-]+/[\w.-]+#[0-9]+\b")


def _files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            out.append(top)
            continue
        for path in top.rglob("*"):
            parts = path.relative_to(ROOT).parts
            if (path.is_file() and not SKIPPED_DIRS.intersection(parts)
                    and not any(p.endswith(".egg-info") for p in parts)):
                out.append(path)
    return sorted(out)


def pointers_in(text: str) -> list[str]:
    """Each pointer in `text`, after public links are set aside."""
    return [m.group(0) for m in POINTER.finditer(ALLOWED.sub(" ", text))]


def test_the_pattern_finds_each_kind_and_spares_public_links() -> None:
    assert pointers_in("see the " + "iss" + "ue 13 fix") == ["iss" + "ue 13"]
    assert pointers_in("(" + "Iss" + "ues 9 and 17)") == ["Iss" + "ues 9"]
    assert pointers_in("STY" + "LE rule 4") == ["STY" + "LE rule"]
    assert pointers_in("refer" + "ence/nvml.md §1") == ["refer" + "ence/nvml.md"]
    assert pointers_in("../" + "shared/seed") == ["../" + "shared"]
    assert pointers_in("(refer" + "ence §5.3)") == ["refer" + "ence §"]
    assert pointers_in("NVIDIA/dcgm-exporter#594 and https://github.com/o/r/issues/12") == []
    assert pointers_in("an issue with 3 GPUs; tissue 4") == []


def test_no_pointer_outside_the_repository() -> None:
    found: list[str] = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images, compiled fixtures)
        for lineno, line in enumerate(text.splitlines(), 1):
            for hit in pointers_in(line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {hit!r}")
    assert not found, "pointers a clone cannot follow (write the fact instead):\n" + "\n".join(found)


def test_every_decision_record_named_in_the_repository_exists_and_is_indexed() -> None:
    records = ROOT / "docs" / "decisions"
    index = (records / "README.md").read_text(encoding="utf-8")
    named: set[str] = set()
    for path in _files():
        if path.suffix in (".py", ".md", ".toml", ".sh", ".yaml", ".yml"):
            named.update(re.findall(r"decisions/([0-9]{4}-[a-z0-9-]+\.md)",
                                    path.read_text(encoding="utf-8", errors="replace")))
    assert named, "no code or document links a decision record"
    missing = sorted(n for n in named if not (records / n).is_file())
    assert not missing, missing
    unindexed = sorted(p.name for p in records.glob("[0-9]*.md") if f"({p.name})" not in index)
    assert not unindexed, unindexed
