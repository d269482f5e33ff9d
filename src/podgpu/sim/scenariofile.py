"""Reading a scenario file, bounded: at most MAX_FILE_BYTES of UTF-8, JSON or YAML,
nesting refused before a recursive parser sees it; every problem one ConfigError naming the
file. podgpu.sim.scenario validates what comes out."""

from __future__ import annotations

import importlib
import json
from typing import Any

from podgpu.errors import ConfigError

MAX_FILE_BYTES = 1 << 20


def decode_scenario(text: str, path: str, *, yaml: bool) -> Any:
    """JSON or YAML text -> plain data; ConfigError (never a traceback) on anything wrong."""
    if _nesting(text) > 32:
        raise ConfigError(f"{path}: nested more than 32 levels deep; a scenario needs 6")
    if yaml:
        try:
            yaml_mod: Any = importlib.import_module("yaml")
        except ImportError:
            raise ConfigError(
                f"{path}: YAML scenarios need PyYAML; install it or use JSON"
            ) from None
        try:
            return yaml_mod.safe_load(text)
        except yaml_mod.YAMLError as exc:
            first = str(exc).strip().splitlines()
            raise ConfigError(f"{path}: not valid YAML: {' '.join(first[:4])[:300]}") from None
        except (RecursionError, ValueError, OverflowError) as exc:
            raise ConfigError(f"{path}: not a usable YAML document: "
                              f"{type(exc).__name__}") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {str(exc)[:200]}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _nesting(text: str) -> int:
    """Deepest bracket or indentation nesting, counted without parsing (so a 100,000-deep
    document is refused before a recursive parser sees it). Brackets inside strings count too:
    an over-estimate, which only matters for absurd files."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    indent = max((len(line) - len(line.lstrip(" -")) for line in text.splitlines()), default=0)
    return max(deepest, indent // 2)
