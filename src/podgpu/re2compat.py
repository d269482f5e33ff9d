"""Every user-written regex, compiled with Go's RE2 semantics.

dcgm-exporter (its pod-label allowlist), the CloudWatch agent (`label_matcher`,
`metric_selectors`) and Prometheus (relabel `regex`) are Go programs: their users write Go
`regexp` syntax. Python's `re` refuses some of it (`\\z`, `\\pL`, `\\Q...\\E`, `(?U)`) and reads
other parts differently (`[[:alpha:]]` is a character set of `:`, `a`, `l`, ... in Python, the
ASCII letters in Go). So podgpu compiles them all here, through Google's RE2 (the `google-re2`
binding of the C++ library Go's package was written to match), and never through `re`.

The differences between C++ RE2 and Go's `regexp` that a user could reach are closed here:
Go refuses `\\C` (C++ RE2 reads it as "any byte"), and Go has no memory budget on a program
(C++ RE2's default of 8 MiB is raised so a long alternation Go accepts compiles here too).

Three ways of matching, because the Go programs use three:
- `search`: Go's `MatchString`, unanchored (the agent's `label_matcher` and `metric_selectors`,
  dcgm-exporter's allowlist);
- `fullmatch`: Prometheus' relabel regex, compiled as `^(?s:PATTERN)$` by `compile_prometheus`;
- `expand`: Go's `Regexp.ExpandString` for relabel `replacement` and `target_label` (`$1`,
  `${1}`, `$name`, `${name}`, `$$`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]  # the binding ships no type hints

from podgpu.errors import ConfigError

_MAX_MEM = 64 << 20
"""Bytes RE2 may use for one compiled program (its default, 8 MiB, refuses very long
alternations that Go accepts; Go's own limit is on the parsed size, not memory)."""


def _options() -> Any:
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
    anchored: bool = False
    _rx: Any = field(default=None, repr=False, compare=False)

    def search(self, text: str) -> bool:
        """True when the pattern matches anywhere in `text` (Go's `MatchString`)."""
        try:
            return self._rx.search(text) is not None
        except UnicodeEncodeError:
            return self._rx.search(_clean(text)) is not None

    def fullmatch(self, text: str) -> bool:
        """True when the pattern matches the whole of `text`."""
        try:
            return self._rx.fullmatch(text) is not None
        except UnicodeEncodeError:
            return self._rx.fullmatch(_clean(text)) is not None

    def groups(self, text: str) -> tuple[str | None, ...] | None:
        """Group 0 and every capture group of the leftmost match, None when no match.

        A group that did not take part is None (Go: index -1, expands to "")."""
        try:
            m = self._rx.search(text)
        except UnicodeEncodeError:
            m = self._rx.search(_clean(text))
        if m is None:
            return None
        return (m.group(0), *m.groups())

    @property
    def group_names(self) -> dict[str, int]:
        """Named groups -> their number."""
        return dict(self._rx.groupindex)

    def expand(self, template: str, text: str) -> str | None:
        """`template` with `$1`/`${name}` filled from the leftmost match in `text`, None when
        the pattern does not match. Go's `Regexp.ExpandString` rules: see `expand_template`."""
        found = self.groups(text)
        if found is None:
            return None
        return expand_template(template, found, self.group_names)


def _is_name_char(ch: str) -> bool:
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ("0" <= ch <= "9")


def expand_template(template: str, groups: Sequence[str | None], names: dict[str, int]) -> str:
    """Go's template expansion: `$$` is a dollar; `$name`/`${name}` takes the longest run of
    letters, digits and `_` as the name; an all-digit name is a group number; an unknown name or
    number, or a group that did not match, gives ""; a `$` not followed by a valid name is kept
    as is. So `$1x` means the group named `1x` (empty), not group 1 then `x`."""
    out: list[str] = []
    i, n = 0, len(template)
    while i < n:
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:])
            break
        out.append(template[i:j])
        i = j + 1
        if i < n and template[i] == "$":
            out.append("$")
            i += 1
            continue
        name, end = _template_name(template, i)
        if name is None:
            out.append("$")
            continue
        i = end
        num = int(name) if name.isdigit() and name.isascii() else names.get(name, -1)
        if 0 <= num < len(groups):
            out.append(groups[num] or "")
    return "".join(out)


def _template_name(template: str, i: int) -> tuple[str | None, int]:
    """The name after a `$` at position i (None if there is none) and where it ends."""
    n = len(template)
    if i < n and template[i] == "{":
        close = template.find("}", i + 1)
        if close < 0:
            return None, i
        name = template[i + 1:close]
        if not name or not all(_is_name_char(c) for c in name):
            return None, i
        return name, close + 1
    end = i
    while end < n and _is_name_char(template[end]):
        end += 1
    if end == i:
        return None, i
    return template[i:end], end


def _compile(text: str, source: str, where: str, anchored: bool) -> GoPattern:
    refused = _go_refuses(source)
    if refused is None:
        try:
            rx = re2.compile(text, _options())
        except re2.error as exc:
            refused = _reason(exc)
    if refused is not None:
        raise ConfigError(_message(where, source, refused))
    return GoPattern(pattern=source, where=where, anchored=anchored, _rx=rx)


def _message(where: str, pattern: str, reason: str) -> str:
    return f"{where}: bad regex {pattern!r}: not a valid regex in Go's RE2 syntax: {reason}"


def _reason(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else str(exc)
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def compile_go(pattern: str, *, where: str) -> GoPattern:
    """`pattern` as Go's `regexp.Compile` reads it (unanchored). Raises ConfigError naming
    `where` and RE2's reason."""
    return _compile(pattern, pattern, where, anchored=False)


def compile_prometheus(pattern: str, *, where: str) -> GoPattern:
    """A Prometheus relabel regex: anchored at both ends and `.` matching newlines too, as
    Prometheus compiles it (`^(?s:PATTERN)$`, prometheus/model/relabel since v2.47/3.x)."""
    if _go_refuses(pattern) is None:
        try:  # the pattern alone first, so the reason names the user's text, not our wrapper
            re2.compile(pattern, _options())
        except re2.error as exc:
            raise ConfigError(_message(where, pattern, _reason(exc))) from None
    return _compile(f"^(?s:{pattern})$", pattern, where, anchored=True)


def check_go(pattern: str, *, where: str) -> None:
    """Validate only (for config checks that keep the text)."""
    compile_go(pattern, where=where)
