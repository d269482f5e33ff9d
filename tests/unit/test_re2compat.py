"""Go RE2 semantics for every user regex.

Expectations are Go's documented behaviour (regexp/syntax docs, Prometheus' relabel anchoring),
chosen where Python's `re` refuses the pattern or reads it differently."""

from __future__ import annotations

import re

import pytest

from podgpu.errors import ConfigError
from podgpu.re2compat import compile_go


@pytest.mark.parametrize(
    ("pattern", "text", "go_matches"),
    [
        (r"abc\z", "xabc", True),  # \z: end of text (Python: bad escape)
        (r"abc\z", "abc\n", False),
        (r"^\pL+$", "Grüße", True),  # \pL: any Unicode letter (Python: bad escape)
        (r"^\pL+$", "gpu0", False),
        (r"^\p{Greek}+$", "αβγ", True),
        (r"^\Q.*+\E$", ".*+", True),  # \Q...\E: literal text (Python: bad escape)
        (r"^\Q.*+\E$", "abc", False),
        (r"^[[:alpha:]]+$", "abc", True),  # POSIX class (Python: a set of ':', 'a', 'l', ...)
        (r"^[[:alpha:]]+$", ":", False),
        (r"^[[:digit:][:upper:]]+$", "A1B2", True),
        (r"^[[:^space:]]+$", "a b", False),
        (r"^[^[:punct:]]+$", "a.b", False),
        (r"(?i)^dcgm", "Dcgm_fi", True),
        (r"\bgpu\b", "a gpu b", True),
        (r"^(?P<x>a)(?<y>b)$", "ab", True),  # both named-group spellings (Go 1.22+)
        (r"^a$", "a\n", False),  # Go's $ is end of text without (?m), Python's allows a final \n
        (r"(?m)^b$", "a\nb\nc", True),
        (r"^.$", "\n", False),  # `.` does not match a newline unless (?s)
    ],
)
def test_go_semantics_where_python_differs(pattern: str, text: str, go_matches: bool) -> None:
    assert compile_go(pattern, where="test").search(text) is go_matches


def test_python_really_differs_on_these() -> None:
    """The cases above are not trivia: Python's `re` refuses or misreads them."""
    for refused in (r"abc\z", r"\pL", r"\Q.\E", r"(?U)a+"):
        with pytest.raises(re.error):
            re.compile(refused)
    with pytest.warns(FutureWarning):  # Python: a set of ':', 'a', 'l', ... then a literal ']'
        assert re.fullmatch(r"[[:alpha:]]+", ":]") is not None
    assert re.search(r"^a$", "a\n") is not None  # Python's $ before a final newline


def test_ungreedy_flag_is_accepted() -> None:
    """Go's (?U) (swap greedy and lazy) compiles and matches; Python's `re` has no such flag."""
    assert compile_go(r"(?U)(a+)b", where="t").search("xaab")


@pytest.mark.parametrize(
    ("pattern", "reason_part"),
    [
        ("(a", "missing )"),
        ("a{1001}", "invalid repetition size"),
        ("x**", "bad repetition operator"),
        (r"\8", "invalid escape"),
        (r"\Z", "invalid escape"),  # Python accepts \Z; Go does not
        (r"\C", "invalid escape"),  # C++ RE2 accepts \C (any byte); Go does not
        ("[[:foo:]]", "invalid character class range"),
    ],
)
def test_go_refuses_names_where_and_reason(pattern: str, reason_part: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_go(pattern, where="cfg.json: metric_declaration[2].label_matcher")
    text = str(info.value)
    assert text.startswith("cfg.json: metric_declaration[2].label_matcher: ")
    assert repr(pattern) in text
    assert reason_part in text


def test_c_inside_quote_is_literal() -> None:
    assert compile_go(r"^\Q\C\E$", where="t").search("\\C")
    assert compile_go(r"^\\C$", where="t").search("\\C")


def test_lone_surrogate_does_not_crash() -> None:
    assert compile_go("a.b", where="t").search("a\ud800b")


def test_pod_label_allowlist_takes_go_syntax() -> None:
    """dcgm-exporter's `--kubernetes-pod-label-allowlist-regex` is a Go regex: `\\z` and POSIX
    classes start podgpu and mean what they mean in Go."""
    from podgpu.attribution.enrich import compile_allowlist
    from podgpu.config import parse_serve_args

    settings = parse_serve_args(
        ["--kubernetes-pod-label-allowlist-regex", r"^app\z,^[[:upper:]]"], {})
    assert settings.kubernetes.label_allowlist == (r"^app\z", "^[[:upper:]]")
    app, upper = compile_allowlist(settings.kubernetes.label_allowlist)
    assert app.search("app") and not app.search("app.kubernetes.io/name")
    assert upper.search("Team") and not upper.search("team") and not upper.search(":")
