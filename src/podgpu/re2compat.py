"""Every user-written regex, compiled with Go's RE2 semantics.

dcgm-exporter (its pod-label allowlist) and the CloudWatch agent (`label_matcher`,
`metric_selectors`) are Go programs: their users write Go `regexp` syntax. Python's `re`
refuses some of it (`\\z`, `\\pL`, `\\Q...\\E`, `(?U)`) and reads other parts
differently (`[[:alpha:]]` is a character set of `:`, `a`, `l`, ... in Python, the ASCII letters
in Go). So podgpu compiles them all here, through Google's RE2 (the `google-re2`
binding of the C++ library Go's package was written to match), and never through `re`.

The differences between C++ RE2 and Go's `regexp` that a user could reach are closed here:
Go refuses `\\C` (C++ RE2 reads it as "any byte"), and Go has no memory budget on a program
(C++ RE2's default of 8 MiB is raised so a long alternation Go accepts compiles here too).

Patterns are matched unanchored, as Go's `MatchString` does (the agent's `label_matcher` and
`metric_selectors`, dcgm-exporter's allowlist).

Decision record: docs/decisions/0013-go-re2-for-user-regexes.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podgpu.errors import ConfigError

_MAX_MEM = 64 << 20
"""Bytes RE2 may use for one compiled program (its default, 8 MiB, refuses very long
alternations that Go accepts; Go's own limit is on the parsed size, not memory)."""


def _options(re2: Any) -> Any:
    opts = re2.Options()
    opts.log_errors = False  # the reason goes into our ConfigError, not onto stderr
    opts.max_mem = _MAX_MEM
    return opts


def _go_refuses(pattern: str) -> str | None:
    """The reason Go's parser refuses what C++ RE2 accepts, or None.

    Only `\\C` (outside `\\Q...\\E`) is such a case."""
    i, n, quoted = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if quoted:
            if pattern.startswith("\\E", i):
                quoted = False
                i += 2
                continue
            i += 1
            continue
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt == "C":
                return "invalid escape sequence: `\\C`"
            if nxt == "Q":
                quoted = True
            i += 2
            continue
        i += 1
    return None


def _clean(text: str) -> str:
    """Text RE2 can take: a lone surrogate (from a JSON `\\ud800`) becomes U+FFFD, which is what
    Go's regexp reads an invalid UTF-8 byte as. Only called when the binding refused the text."""
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


@dataclass(frozen=True, slots=True)
class GoPattern:
    """One compiled user regex. `pattern` is what the user wrote; `where` names the flag, file
    or field it came from (for messages)."""

    pattern: str
    where: str = field(compare=False)
    _rx: Any = field(default=None, repr=False, compare=False)

    def search(self, text: str) -> bool:
        """True when the pattern matches anywhere in `text` (Go's `MatchString`)."""
        try:
            return self._rx.search(text) is not None
        except UnicodeEncodeError:
            return self._rx.search(_clean(text)) is not None


def _compile(pattern: str, where: str) -> GoPattern:
    # imported with the first pattern: an agent given no regex never loads the C++ library
    import re2  # type: ignore[import-untyped]  # the binding ships no type hints

    refused = _go_refuses(pattern)
    if refused is None:
        try:
            rx = re2.compile(pattern, _options(re2))
        except re2.error as exc:
            refused = _reason(exc)
    if refused is not None:
        raise ConfigError(_message(where, pattern, refused))
    return GoPattern(pattern=pattern, where=where, _rx=rx)


def _message(where: str, pattern: str, reason: str) -> str:
    return f"{where}: bad regex {pattern!r}: not a valid regex in Go's RE2 syntax: {reason}"


def _reason(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else str(exc)
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def compile_go(pattern: str, *, where: str) -> GoPattern:
    """`pattern` as Go's `regexp.Compile` reads it (unanchored). Raises ConfigError naming
    `where` and RE2's reason."""
    return _compile(pattern, where)
