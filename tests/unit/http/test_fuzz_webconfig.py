"""Fuzzing the web config through the CLI, `podgpu serve --web-config-file`, and
through the parser: near-valid documents with hostile values (control characters, escapes, deep
nesting, FIFOs and devices as certificate files, long strings) and random text. Before: 1,383
tracebacks in 10,296 cases through the CLI.

Properties: no exception escapes `podgpu.cli.main` (a traceback); a refusal is exit 2 with one
`podgpu: ` line naming the file; the parser raises nothing but WebConfigError; the message for
/health never contains a user name from the file. The CLI runs in-process with a missing
`--cloudwatch-config`, which is read after the web config, so a valid web config ends there too
(exit 2) instead of serving. The 2-minute form is bench/fuzz_cli.py."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podgpu.cli import main
from podgpu.http.webconfig import WebConfigError, parse_web_config

FUZZ = settings(max_examples=120,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"
NASTY = ["\x00", "\x01", "\x1b[2J", "\x7f", "\x85", "\u202e", "\u2028", "\ud7ff", "\r\n", "\t",
         "a" * 5000, "9" * 400, "$2y$99$" + "a" * 53, "../../etc/passwd", "/dev/zero", "/proc",
         "{{", "*alias", "&anchor", "!!python/object:os.system", "TLS13", "1s", "-1", "1e999"]
scalars = (st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats()
           | st.text(max_size=40) | st.sampled_from([*NASTY, HASH]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=12)
TEMPLATE: dict[str, Any] = {
    "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key",
                          "client_auth_type": "RequireAndVerifyClientCert",
                          "client_ca_file": "ca.crt", "client_allowed_sans": ["a.example"],
                          "min_version": "TLS12", "cipher_suites": ["TLS_AES_128_GCM_SHA256"],
                          "curve_preferences": ["X25519"]},
    "http_server_config": {"headers": {"X-Frame-Options": "deny"}, "http2": True},
    "basic_auth_users": {"prometheus-scraper": HASH},
    "rate_limit": {"interval": "1s", "burst": 2},
}
paths = st.lists(st.sampled_from(["tls_server_config", "http_server_config", "basic_auth_users",
                                  "rate_limit", "cert_file", "key_file", "client_auth_type",
                                  "client_allowed_sans", "cipher_suites", "headers",
                                  "X-Frame-Options", "interval", "burst", "prometheus-scraper",
                                  "extra"]), min_size=1, max_size=3)


def mutate(doc: Any, path: list[str], value: Any) -> Any:
    """`doc` with the node at `path` (as far as it exists) replaced by `value`."""
    if not isinstance(doc, dict) or not path:
        return value
    out = dict(doc)
    key = path[0]
    out[key] = mutate(doc.get(key), path[1:], value) if key in doc else value
    return out


def documents() -> st.SearchStrategy[str]:
    structured = st.builds(lambda p, v, drop: yaml.safe_dump(
        {k: x for k, x in mutate(TEMPLATE, p, v).items() if k not in drop}, allow_unicode=True),
        paths, values, st.sets(st.sampled_from(list(TEMPLATE))))
    deep = st.integers(17, 6000).map(lambda n: "a: " + "[" * n + "]" * n + "\n")
    raw = st.text(alphabet=string.printable + "\x00\x01\x1b\x7f\x85\u202e", max_size=300)
    return structured | deep | raw


def user_names(text: str) -> list[str]:
    if "basic_auth_users" not in text or text.count("[") + text.count("{") > 40:
        return []  # (PyYAML is quadratic in the nesting: keep the helper cheap)
    try:
        doc = yaml.safe_load(text)
    except Exception:
        return []
    users = doc.get("basic_auth_users") if isinstance(doc, dict) else None
    if not isinstance(users, dict):
        return []
    # a name that appears only as a user (not also as another key or a value) must not leak
    return [str(u) for u in users if len(str(u)) >= 4 and text.count(str(u)) == 1]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the files the template names: a FIFO, a device link, an empty file."""
    d = tmp_path_factory.mktemp("webfuzz")
    os.mkfifo(d / "tls.crt")
    os.symlink("/dev/zero", d / "tls.key")
    (d / "ca.crt").write_text("")
    return d


@FUZZ
@given(text=documents())
@example(text="basic_auth_users:\n  al\x01ice: x\n")
@example(text="a: " + "[" * 5000 + "]" * 5000 + "\n")
@example(text=f"basic_auth_users:\n  admin-user: {HASH}\n  admin-user: {HASH}\n")
def test_web_config_through_the_cli(tree: Path, capsys: pytest.CaptureFixture[str],
                                    text: str) -> None:
    path = tree / "web.yml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    status = main(["serve", "--simulate", "1", "--web-config-file", str(path),
                   "--cloudwatch-config", str(tree / "missing.json")])
    err = capsys.readouterr().err
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("podgpu: ") and "Traceback" not in err, err[-2000:]
    assert str(path) in last or "--cloudwatch-config" in last, last


@FUZZ
@given(text=documents())
def test_parser_raises_only_its_error_and_health_names_no_user(text: str) -> None:
    try:
        parse_web_config(text, "/etc/podgpu/web.yml")
    except WebConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("/etc/podgpu/web.yml")
        for name in user_names(text):
            assert name not in exc.public, (name, exc.public)
