"""The exporter-toolkit web config (`--web-config-file`): read, parse and validate, nothing else.

Same keys as prometheus/exporter-toolkit's `web-config.yml`, so a dcgm-exporter DaemonSet's file
works unchanged. Pure: reads no certificate, builds no socket; `http.tls` turns `TlsServerConfig`
into an `ssl.SSLContext` and `http.auth` checks passwords.

Strict like the toolkit (unknown and duplicate keys are errors). Every problem is one line naming
file, line and key path; values that may be secret (inline keys, password hashes) never appear in a
message, and YAML syntax errors are reported without the source excerpt PyYAML would print.
Where podgpu is stricter than the toolkit (both `cert` and `cert_file`, `RequireAnyClientCert`,
SANs without verification, `burst: 0`) it says why in the message; docs/web-config.md lists them.

Bounded before PyYAML sees the text (PyYAML turns a control character or 5,000-deep nesting into
a traceback): regular files only, at most
MAX_FILE_BYTES of UTF-8, no control characters outside tab and line breaks, and nesting no deeper
than MAX_DEPTH (counted on PyYAML's event stream, which is not recursive; its composer is).

Modules: `webconfig_model` (names, values, the result), `webconfig_tree` (the node walker), this
one (files and YAML); the public names of all three are importable from here.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from podgpu.files import FileReadError, read_head
from podgpu.http.webconfig_model import (
    ALLOWED_HEADERS,
    CLIENT_AUTH_TYPES,
    GO_CIPHERS,
    GO_CURVES,
    TLS_VERSIONS,
    TlsServerConfig,
    WebConfig,
    WebConfigError,
    parse_go_duration,
)
from podgpu.http.webconfig_tree import TreeParser

__all__ = ["ALLOWED_HEADERS", "CLIENT_AUTH_TYPES", "GO_CIPHERS", "GO_CURVES", "MAX_DEPTH",
           "MAX_FILE_BYTES", "TLS_VERSIONS", "TlsServerConfig", "WebConfig", "WebConfigError",
           "load_web_config", "parse_go_duration", "parse_web_config", "read_regular"]

MAX_FILE_BYTES = 1 << 20  # a web config is a few KB; refuse to parse anything absurd
MAX_DEPTH = 16
"""Nesting the format needs: 4 (tls_server_config.cipher_suites[i] in a flow list)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def read_regular(path: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the regular file `path`, through the one bounded file reader
    (podgpu.files): a FIFO, device or directory is refused without blocking. Raises
    WebConfigError whose message is the reason alone (the caller names the file and its role)."""
    try:
        return read_head(path, limit + 1)[0]
    except FileReadError as exc:
        raise WebConfigError(str(exc)) from None


def load_web_config(path: str) -> WebConfig:
    """Read and validate `path`. Raises WebConfigError naming the file, line and key."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except WebConfigError as exc:
        raise WebConfigError(f"{path}: cannot read the web config: {exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a web config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebConfigError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return parse_web_config(text, path)


def parse_web_config(text: str, path: str) -> WebConfig:
    """Validate the YAML `text` of the file at `path` (used for messages and relative paths)."""
    bad = _CONTROL.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise WebConfigError(f"{path}:{line}: control character U+{ord(bad.group()):04X} (only "
                             "tab and line breaks may appear in a web config)")
    deepest, line = _nesting(text)
    if deepest > MAX_DEPTH:
        raise WebConfigError(f"{path}:{line}: nested more than {MAX_DEPTH} levels deep; a web "
                             "config needs 4")
    yaml = _yaml()
    loader = None
    try:
        _check_depth(yaml, text, path)
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise WebConfigError(f"{path}:{line}: not valid YAML: "
                             f"{_one_line(exc.problem or exc.context)}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: not valid YAML: {type(exc).__name__}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return TreeParser(path).config(root)


def _nesting(text: str) -> tuple[int, int]:
    """(deepest nesting, its line), counted without PyYAML: brackets (those in strings too, an
    over-estimate no web config reaches) and indentation in steps of 2 columns. PyYAML's scanner
    takes time quadratic in the nesting (1,565 brackets: 6.5 s) and its composer recurses, so
    absurd nesting must be refused before either sees it."""
    depth = deepest = 0
    where = 1
    line = 1
    for ch in text:
        if ch == "[" or ch == "{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif ch == "]" or ch == "}":
            depth = max(0, depth - 1)
        elif ch == "\n":
            line += 1
    for number, row in enumerate(text.splitlines(), 1):
        indent = (len(row) - len(row.lstrip(" -"))) // 2
        if indent > deepest:
            deepest, where = indent, number
    return deepest, where


def _check_depth(yaml: Any, text: str, path: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise WebConfigError(f"{path}:{line}: nested more than {MAX_DEPTH} levels deep; "
                                     "a web config needs 4")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _yaml() -> Any:
    """PyYAML (untyped, so imported as Any)."""
    return importlib.import_module("yaml")
