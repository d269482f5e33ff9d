"""Every integer flag of every command reads one grammar, Go's strconv.ParseInt(text, 0, 64) (what
dcgm-exporter's flags take): `30000`, `30_000`, `0x7530`, `0o17`, `0b1`, `017`. The flags are
found from the option tables themselves (every module of podgpu that builds an `Option`), and a
flag is an integer flag when its parser turns a number into an int. Sizes (`16M`) are the one
exception, and the README names each of them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import podgpu
from podgpu.config import values
from podgpu.options import Option

SRC = Path(podgpu.__file__).parent
README = Path(__file__).resolve().parents[2] / "README.md"


def _option_tables() -> list[Option]:
    found: dict[tuple[tuple[str, ...], str], Option] = {}
    for path in sorted(SRC.rglob("*.py")):
        if "Option((" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(
            ".".join(("podgpu", *path.relative_to(SRC).with_suffix("").parts)))
        for value in vars(module).values():
            if type(value) is tuple and value and all(isinstance(o, Option) for o in value):
                for opt in value:
                    found[(opt.flags, opt.dest)] = opt
    return list(found.values())


def _probe(opt: Option) -> int | None:
    """A value the flag takes, or None when the flag does not read integers."""
    candidate = opt.default if type(opt.default) is int else 8
    try:
        parsed = opt.parse(str(candidate))
    except ValueError:
        return None
    return candidate if type(parsed) is int and parsed == candidate else None


OPTIONS = _option_tables()
INTEGER = {opt.name: (opt, probe) for opt in OPTIONS if (probe := _probe(opt)) is not None}
SIZES = {name for name, (opt, _) in INTEGER.items() if opt.parse is values.size}
GO = sorted(set(INTEGER) - SIZES)


def test_the_tables_hold_the_integer_flags_of_every_command() -> None:
    # serve, the bridge, the CloudWatch assets, top, plan and burn each have integer flags
    for name in ("--collect-interval", "--http-max-connections", "--emf-storage-resolution",
                 "--scrape-sample-limit", "--expected-gpus", "--width", "--gpus-per-node",
                 "--size"):
        assert name in GO
    assert {"--emf-queue-bytes", "--scrape-body-limit"} == SIZES


@pytest.mark.parametrize("name", GO)
def test_every_integer_flag_reads_go_syntax(name: str) -> None:
    opt, n = INTEGER[name]
    for spelling in (hex(n), oct(n), bin(n), f"{n:_}", f"+{n}", f" {n} "):
        assert opt.parse(spelling) == n, spelling
    if n > 0:
        assert opt.parse(f"0{n:o}") == n  # a leading 0 is octal, as in Go
    for bad in ("", "0x", "1_", "_1", "1__0", "0x_", "1e3", "12abc", "9" * 20):
        with pytest.raises(ValueError):
            opt.parse(bad)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_sizes_are_decimal_with_a_unit_and_the_readme_says_which(name: str) -> None:
    opt, _ = INTEGER[name]
    assert opt.parse("16M") == 16 << 20
    assert opt.parse("65536") == 64 << 10
    with pytest.raises(ValueError):
        opt.parse(hex(16 << 20))
    grammar = next(line for line in README.read_text(encoding="utf-8").splitlines()
                   if "Go's integer syntax" in line)
    assert f"`{name}`" in grammar


def test_range_errors_name_what_was_expected() -> None:
    opt, _ = INTEGER["--http-max-connections"]
    assert opt.parse("0x800") == 2048
    with pytest.raises(ValueError, match=r"a number of connections in 16\.\.1000000, got '0xf'"):
        opt.parse("0xf")
