"""The one option engine: a table of `Option`s adds flags to argparse and resolves each value
flag > environment > default, for every command.

Flags are read as Go's `flag` package (which dcgm-exporter's urfave/cli uses) reads them, so a
DaemonSet written for dcgm-exporter starts podgpu unchanged: `-flag` and
`--flag` are the same flag, long or short (`-collectors`, `--f`); values as `-flag=v` or
`-flag v`; a bool flag alone means true and takes `=false`. Integer settings accept Go's integer
syntax (`strconv.ParseInt` base 0: `0x7530`, `30_000`, `0o17`, `0b1`, `017`). A value outside an
option's `bounds` is clamped with one warning naming the flag or variable and the value used,
because dcgm-exporter starts with it (exit 2 would crash-loop a migrated DaemonSet).

Adding a flag is one `Option(...)` entry in a command's table (docs/design.md, "Adding a flag").
This module and the tables are the only readers of the environment; commands receive frozen
settings built from `Resolved`.

Decision record: docs/decisions/0007-dcgm-exporter-flags.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from podgpu.errors import ConfigError

INT64 = (-(1 << 63), (1 << 63) - 1)


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool spellings, plus yes/no/on/off; '' is false (an unset env value)."""
    t = text.strip().lower()
    if t in ("1", "true", "t", "yes", "y", "on"):
        return True
    if t in ("0", "false", "f", "no", "n", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _underscores_ok(s: str) -> bool:
    """Go's rule for `_` in an integer literal: only between digits, or after a base prefix."""
    saw, i = "^", 0
    if s[:1] in ("+", "-"):
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    for ch in s[i:]:
        if ch.isdigit() or (hexa and ch.lower() in "abcdef"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"


def go_int(text: str) -> int:
    """An integer as Go's strconv.ParseInt(text, 0, 64) reads it: optional sign, then decimal,
    0x/0X hex, 0o/0O or a leading 0 octal, 0b/0B binary, `_` between digits. Raises ValueError."""
    s = text.strip()
    body = s[1:] if s[:1] in ("+", "-") else s
    base, digits = 10, body
    if len(body) >= 2 and body[0] == "0" and body[1].lower() in "box":
        base, digits = {"b": 2, "o": 8, "x": 16}[body[1].lower()], body[2:]
    elif len(body) >= 2 and body[0] == "0":
        base, digits = 8, body[1:]
    clean = digits.replace("_", "")
    ok = bool(clean) and _underscores_ok(s) and all(c in "0123456789abcdef"[:base] for c in
                                                    clean.lower())
    value = int(clean, base) * (-1 if s.startswith("-") else 1) if ok else None
    if value is None or not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"expected an integer (Go syntax: 30000, 30_000, 0x7530), got {text!r}")
    return value


def go_int_between(low: int, high: int, what: str) -> Callable[[str], int]:
    """A parser of `what` (e.g. "a number of connections"): a Go integer in low..high."""

    def parse(text: str) -> int:
        value = go_int(text)
        if not low <= value <= high:
            raise ValueError(f"expected {what} in {low}..{high}, got {text!r}")
        return value

    return parse


def go_ms(text: str) -> int:
    """Milliseconds as a Go integer (dcgm-exporter's -c, -x and window flags)."""
    try:
        return go_int(text)
    except ValueError:
        raise ValueError(f"expected milliseconds as an integer (Go syntax: 30000, 30_000, "
                         f"0x7530), got {text!r}") from None


def csv_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


class Option(NamedTuple):
    """One flag: its spellings, environment variable, default, parser and help.

    `bounds` (inclusive, in the parsed unit) clamps an out-of-range value with a warning;
    `parse` raises ValueError for a value that cannot be read at all (exit 2, one line naming the
    flag or variable). `shown` is how --help prints the default when `str(default)` would not do.
    """

    flags: tuple[str, ...]
    dest: str
    env: str | None
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    is_bool: bool = False
    metavar: str | None = None
    append: bool = False
    """Repeatable flag; the values are joined with commas before `parse`."""
    bounds: tuple[int | float, int | float] | None = None
    unit: str = ""
    shown: str | None = None
    hidden: bool = False

    @property
    def name(self) -> str:
        """The spelling used in messages: the longest flag."""
        return max(self.flags, key=len)


def _shown(opt: Option) -> str:
    if opt.shown is not None:
        return opt.shown
    if opt.default is None or opt.default == ():
        return "unset"
    if type(opt.default) is tuple:  # a list such as (20.0, 20.0), not a NamedTuple record
        return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in opt.default)
    if isinstance(opt.default, bool):
        return "true" if opt.default else "false"
    if isinstance(opt.default, float):
        return f"{opt.default:g}"
    return str(opt.default)


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option], *,
                bool_takes_word: bool = True) -> None:
    """Register each option; argparse defaults stay None so `resolve` can apply env and default.

    `bool_takes_word=False` for a command with positional arguments: `--once URL` must not read
    URL as the bool's value (Go's flag never does; serve keeps `-k true` for old DaemonSets)."""
    for opt in options:
        text = argparse.SUPPRESS if opt.hidden else (
            opt.help + f" [{'env ' + opt.env + '; ' if opt.env else ''}default {_shown(opt)}]")
        if opt.is_bool and not bool_takes_word:
            parser.add_argument(*opt.flags, dest=opt.dest, action="store_const", const="true",
                                default=None, help=text)
        elif opt.is_bool:
            parser.add_argument(*opt.flags, dest=opt.dest, nargs="?", const="true", default=None,
                                metavar="BOOL", help=text)
        else:
            parser.add_argument(*opt.flags, dest=opt.dest, default=None, metavar=opt.metavar,
                                action="append" if opt.append else "store", help=text)


def terminal_columns() -> int:
    """The terminal's width as shutil.get_terminal_size finds it (COLUMNS, else the terminal of
    stdout, else 80), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    stdout = sys.__stdout__
    if columns <= 0 and stdout is not None:
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a terminal, or no file descriptor
            columns = 0
    return columns if columns > 0 else 80


def help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's own formatter at the width it would pick (the terminal's, less 2). Given the
    width, it does not ask shutil for it: argparse makes a formatter for every option it
    registers, and the default one imports shutil (with bz2, lzma and fnmatch) to do so."""
    return argparse.HelpFormatter(prog, width=terminal_columns() - 2)


def new_parser(prog: str, description: str | None, options: Iterable[Option],
               **kwargs: Any) -> argparse.ArgumentParser:
    """A parser with `options` registered; no prefix abbreviations (Go's flag has none)."""
    kwargs.setdefault("formatter_class", help_formatter)
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False,
                                     **kwargs)
    add_options(parser, options)
    return parser


def go_flags(args: Sequence[str], options: Iterable[Option],
             extra: Iterable[str] = ("-h", "--help", "-v", "--version")) -> list[str]:
    """Rewrite Go flag spellings into the ones argparse registered: `-collectors` ->
    `--collectors`, `--f` -> `-f`, `--rbmn` -> `-rbmn`. Anything unknown is left for the parser
    to refuse; `--` ends the flags as in Go."""
    known = {f for opt in options for f in opt.flags} | set(extra)
    out: list[str] = []
    for i, a in enumerate(args):
        if a == "--":
            out.extend(args[i:])
            break
        name, eq, value = a.partition("=")
        if name.startswith("-") and name not in known:
            bare = name.lstrip("-")
            if bare and not name.startswith("---"):  # Go refuses three dashes; so will argparse
                for candidate in ("-" + bare, "--" + bare):
                    if candidate in known:
                        a = candidate + eq + value
                        break
        out.append(a)
    return out


class Resolved:
    """The values of one command's options, where each came from, and the clamp warnings (a
    plain class, not a dataclass: made before the first answer, docs/design.md)."""

    __slots__ = ("origin", "values", "warnings")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        """dest -> the flag, 'environment variable X' or 'FLAG (default)', for messages."""
        self.warnings: list[str] = []

    def fail(self, dest: str, problem: str) -> ConfigError:
        """A one-line error naming where the value of `dest` came from."""
        return ConfigError(f"{self.origin[dest]} {self.values[dest]!r}: {problem}")


def resolve(ns: argparse.Namespace, options: Iterable[Option],
            env: Mapping[str, str] | None = None) -> Resolved:
    """flag > environment (non-empty) > default; parse, then clamp to `bounds` with a warning."""
    env = os.environ if env is None else env
    out = Resolved()
    for opt in options:
        raw = getattr(ns, opt.dest, None)
        if isinstance(raw, list):
            raw = ",".join(raw)
        source = opt.name
        if raw is None and opt.env and env.get(opt.env) not in (None, ""):
            raw, source = env[opt.env], f"environment variable {opt.env}"
        if raw is None:
            out.values[opt.dest] = opt.default
            out.origin[opt.dest] = f"{opt.name} (default)"
            continue
        out.origin[opt.dest] = source
        try:
            value = parse_bool(raw) if opt.is_bool else opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        if opt.bounds is not None and not opt.bounds[0] <= value <= opt.bounds[1]:
            used = min(max(value, opt.bounds[0]), opt.bounds[1])
            unit = f" {opt.unit}" if opt.unit else ""
            out.warnings.append(f"{source} {raw.strip()}: outside {opt.bounds[0]}..{opt.bounds[1]}"
                                f"{unit}; using {used}{unit}")
            value = used
        out.values[opt.dest] = value
    return out


def env_value(name: str, env: Mapping[str, str] | None = None) -> str:
    """One environment variable outside any option table (NODE_NAME); '' when unset."""
    return (os.environ if env is None else env).get(name, "")
