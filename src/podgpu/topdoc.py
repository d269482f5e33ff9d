"""`podgpu top`'s side of a node: fetch its snapshot document within bounds, check every key `top`
reads, and make node-supplied text safe for a terminal.

A node is a peer `top` does not control (a compromised pod can name itself anything; a proxy can
answer anything), so:

- the answer is read with one deadline for the whole of it (podgpu.boundedget: a trickling node
  cannot hold `top` past `--timeout`), at most `MAX_BODY_BYTES` after decompression, no redirects;
- the JSON is nested no deeper than `MAX_DEPTH` (checked on the bytes before parsing), has no
  NaN or Infinity, and holds at most `MAX_DEVICES` devices and `MAX_PODS` pods;
- every key and type that `top` reads is checked here, so a malformed node is one `BAD` line and
  every other node still renders;
- `clean()` escapes every control character before the terminal sees it: C0 (newline and tab
  included: a cell is one line), DEL, C1, and the Unicode format characters (bidi overrides such
  as U+202E, zero-width characters), line/paragraph separators and lone surrogates.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from podgpu.boundedget import GetError, get
from podgpu.sinks.live.schema import SnapshotView
from podgpu.sinks.live.view import SCHEMA

MAX_BODY_BYTES = 8 * 1024 * 1024
"""A node with 512 devices and 4,096 pods is ~5 MB of JSON."""
MAX_DEPTH = 32
"""The document nests 4 deep; a deeper one is not a podgpu snapshot."""
MAX_DEVICES = 512
MAX_PODS = 4096
MAX_CELL = 200
"""Characters of one node-supplied string shown; longer ones end with '…'."""
MAX_NUMBER = 1e18
_ASCII_UNSAFE = re.compile("[\x00-\x1f\x7f]")
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
"""A JSON string, or an unterminated one to the end (which json.loads then refuses): a match
never fails once it starts at a quote, so removing strings is linear in the body (a pattern that
can fail rescans from every later quote: 200 KB of escaped quotes took minutes)."""
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")


class BadDocument(ValueError):
    """The node answered, but not with a snapshot `top` can show; the message says where."""


@dataclass(frozen=True, slots=True)
class NodeResult:
    """One endpoint's answer: the view, or why there is none (`bad`: it answered something
    that is not a usable snapshot; otherwise it did not answer)."""

    url: str
    view: SnapshotView | None
    error: str = ""
    bad: bool = False


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def clean(text: object, limit: int = MAX_CELL) -> str:
    """Node-supplied text made safe for a terminal: every control or format character becomes a
    visible escape (`\\x1b`, `\\u202e`), at most `limit` characters are kept. Rich markup is
    never parsed because cells are Text objects."""
    s = str(text)
    cut = len(s) > limit
    s = s[:limit]
    if s.isascii():
        s = _ASCII_UNSAFE.sub(lambda m: _escape(m[0]), s)
    else:
        s = "".join(_escape(c) if c < " " or unicodedata.category(c) in _UNSAFE_CATEGORIES
                    else c for c in s)
    return s + "…" if cut else s


def depth_ok(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON `data` nests at most `limit` deep, decided at C speed: strings removed, then
    innermost bracket pairs removed once per level."""
    rest = _STRINGS.sub(b"", data).translate(None, _BRACKETS)
    for _ in range(limit):
        if not rest:
            return True
        shorter = _INNERMOST.sub(b"", rest)
        if shorter == rest:
            return True  # unbalanced: json.loads says what is wrong
        rest = shorter
    return not rest


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse(data: bytes) -> SnapshotView:
    """The checked snapshot document (its shape checked, so typed from here on); BadDocument
    says what is wrong."""
    if not depth_ok(data):
        raise BadDocument(f"JSON nested deeper than {MAX_DEPTH}")
    try:
        view = json.loads(data, parse_constant=_no_constants)
    except RecursionError:
        raise BadDocument(f"JSON nested deeper than {MAX_DEPTH}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadDocument(f"not JSON: {exc}") from None
    if not isinstance(view, dict) or view.get("schema") != SCHEMA:
        got = view.get("schema") if isinstance(view, dict) else type(view).__name__
        raise BadDocument(f"not a {SCHEMA} document (schema {clean(got, 60)!r})")
    check_view(view)
    return cast(SnapshotView, view)


def fetch(url: str, timeout: float) -> NodeResult:
    """GET one snapshot; every failure becomes the node's error text, never an exception."""
    try:
        answer = get(url, timeout=timeout, max_bytes=MAX_BODY_BYTES,
                     headers={"Accept": "application/json", "Accept-Encoding": "gzip"})
    except GetError as exc:
        return NodeResult(url, None, str(exc))
    try:
        return NodeResult(url, parse(answer.body))
    except BadDocument as exc:
        return NodeResult(url, None, str(exc), bad=True)


# --- the document's shape: what top reads, and nothing else -------------------------------------

Check = Callable[[Any], bool]


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and abs(v) <= MAX_NUMBER)


def _opt_num(v: Any) -> bool:
    return v is None or _num(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_NUMBER


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


_WHAT: dict[Check, str] = {_str: "a string", _num: "a finite number", _opt_num: "a finite number or null",
         _int: "an integer", _bool: "true or false"}


def _fields(obj: Any, where: str, spec: dict[str, Check]) -> None:
    if not isinstance(obj, dict):
        raise BadDocument(f"{where}: expected an object, got {type(obj).__name__}")
    for key, ok in spec.items():
        if key not in obj:
            raise BadDocument(f"{where}.{key}: missing")
        if not ok(obj[key]):
            raise BadDocument(f"{where}.{key}: expected {_WHAT[ok]}, got "
                              f"{clean(json.dumps(obj[key])[:40], 40)}")


def _list(obj: Any, where: str, limit: int) -> list[Any]:
    if not isinstance(obj, list):
        raise BadDocument(f"{where}: expected a list, got {type(obj).__name__}")
    if len(obj) > limit:
        raise BadDocument(f"{where}: {len(obj)} entries, more than {limit}")
    return obj


_TOP: dict[str, Check] = {"node": _str, "backend": _str, "cycle": _int, "taken_at": _num}
_HEALTH: dict[str, Check] = {"status": _str}
_DEVICE: dict[str, Check] = {"gpu": _str, "model": _str, "sharing": _str, "utilization_ratio": _opt_num,
           "memory_used_bytes": _opt_num, "memory_total_bytes": _opt_num,
           "power_watts": _opt_num, "temperature_celsius": _opt_num}
_HOLDER: dict[str, Check] = {"namespace": _str, "pod": _str}
_POD: dict[str, Check] = {"namespace": _str, "pod": _str, "container": _str, "memory_used_bytes": _opt_num,
        "utilization_ratio": _opt_num, "idle": _bool}


def check_view(view: dict[str, Any]) -> None:
    """Every key and type that top's renderer reads; BadDocument names the first bad one."""
    _fields(view, "snapshot", _TOP)
    interval = view.get("interval_seconds")
    if interval is not None and not (_num(interval) and interval > 0):
        raise BadDocument("snapshot.interval_seconds: expected a positive number")
    _fields(view.get("health"), "health", _HEALTH)
    for i, r in enumerate(_list(view["health"].get("reasons"), "health.reasons", 64)):
        if not _str(r):
            raise BadDocument(f"health.reasons[{i}]: expected a string")
    for i, d in enumerate(_list(view.get("devices"), "devices", MAX_DEVICES)):
        _fields(d, f"devices[{i}]", _DEVICE)
        for j, h in enumerate(_list(d.get("holders"), f"devices[{i}].holders", MAX_PODS)):
            _fields(h, f"devices[{i}].holders[{j}]", _HOLDER)
    for i, p in enumerate(_list(view.get("pods"), "pods", MAX_PODS)):
        _fields(p, f"pods[{i}]", _POD)
        for j, g in enumerate(_list(p.get("gpus"), f"pods[{i}].gpus", MAX_DEVICES)):
            if not _str(g):
                raise BadDocument(f"pods[{i}].gpus[{j}]: expected a string")
