"""The repository explains itself: no text in it points at something a clone does not have.

A pointer is a tracker number ("issue" and a number), an item of a tracker entry ("item" and a
number), a numbered rule of an outside style guide, an outside reference file or a folder beside
the checkout; in a text or in a file's name.
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
    r"\b[Ii]te" + r"ms? #?[0-9]+\b",
]))
# In a file's name the words run into the number (bench_issue17.py, fix-item-3.md): a name is
# checked with both patterns.
NAME_POINTER = re.compile(r"(?<![a-z])(iss" + r"ues?|ite" + r"ms?)[-_ ]?#?[0-9]+", re.IGNORECASE)
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
    assert pointers_in("as awsemf does (" + "ite" + "m 3)") == ["ite" + "m 3"]
    assert pointers_in("each item in 3 lists; items of a list") == []


def name_pointers(path: str) -> list[str]:
    """Each pointer in a file's path inside the repository."""
    return pointers_in(path) + [m.group(0) for m in NAME_POINTER.finditer(path)]


def test_the_name_pattern_finds_numbers_run_into_the_words() -> None:
    assert name_pointers("bench/h200_" + "iss" + "ue17.py") == ["iss" + "ue17"]
    assert name_pointers("bench/results/h200-" + "Iss" + "ue-9-2026.json") == ["Iss" + "ue-9"]
    assert name_pointers("docs/fix-" + "ite" + "m_3.md") == ["ite" + "m_3"]
    assert name_pointers("tests/tissue12/systems3.py") == []
    assert name_pointers("bench/results/h200-lost-gpus-2026-12-03.json") == []


def test_no_pointer_in_a_file_name() -> None:
    found = [hit for path in _files() for hit in
             (f"{path.relative_to(ROOT)}: {p!r}" for p in name_pointers(str(path.relative_to(ROOT))))]
    assert not found, "file names a clone cannot follow (name the file for what it holds):\n" + (
        "\n".join(found))


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
