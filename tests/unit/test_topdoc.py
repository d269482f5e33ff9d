"""What `podgpu top` accepts from a node: nesting, numbers, the shape of every
key it reads, and terminal escaping of every control and format character."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podgpu.sinks.live.schema import SnapshotView
from podgpu.top import NodeResult, TopState, plain_text
from podgpu.topdoc import MAX_DEPTH, MAX_PODS, BadDocument, clean, depth_ok, parse
from tests.unit.test_top import GIB, view


def good() -> SnapshotView:
    return view("n", {"p": (0.5, GIB)})


def enc(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_a_good_document_parses() -> None:
    assert parse(enc(good()))["node"] == "n"


@pytest.mark.parametrize(("depth", "ok"), [(1, True), (MAX_DEPTH, True), (MAX_DEPTH + 1, False),
                                           (100_000, False)])
def test_depth_is_decided_on_the_bytes(depth: int, ok: bool) -> None:
    assert depth_ok(b"[" * depth + b"]" * depth) is ok
    assert depth_ok(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')


@pytest.mark.parametrize("data", [
    b'{"schema": "' + b'\\"' * 4_000_000,  # 8 MB of escaped quotes, never terminated
    b'"a\\' + b'\n"\\"' * 100_000,  # a backslash before a line break, repeated
    b'["x\\\\", "y\\"z", "[[[["]',  # escapes inside closed strings
])
def test_strings_are_removed_in_one_pass(data: bytes) -> None:
    """Every match that starts at a quote succeeds (to the closing quote or the end), so the
    pattern never rescans: 8 MB ends in well under the test's deadline (quadratic: hours)."""
    assert depth_ok(data)
    with pytest.raises(BadDocument):
        parse(data)


def test_a_deep_document_is_bad_not_a_crash() -> None:
    doc = b'{"schema": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    with pytest.raises(BadDocument, match="nested deeper than 32"):
        parse(doc)


def mutate(path: str, value: Any = None, delete: bool = False) -> bytes:
    doc = copy.deepcopy(good())
    *head, last = path.split(".")
    obj: Any = doc
    for part in head:
        obj = obj[int(part)] if part.isdigit() else obj[part]
    key: Any = int(last) if last.isdigit() else last
    if delete:
        del obj[key]
    else:
        obj[key] = value
    return enc(doc)


@pytest.mark.parametrize(("data", "why"), [
    (mutate("pods.0.pod", delete=True), "pods[0].pod: missing"),
    (mutate("cycle", "four"), 'snapshot.cycle: expected an integer, got "four"'),
    (mutate("devices.0.utilization_ratio", "x"), "devices[0].utilization_ratio: expected a finite"),
    (mutate("pods.0.idle", 1), "pods[0].idle: expected true or false"),
    (mutate("pods", {}), "pods: expected a list, got dict"),
    (mutate("health", None), "health: expected an object, got NoneType"),
    (mutate("devices.0.holders.0", 7), "devices[0].holders[0]: expected an object"),
    (mutate("interval_seconds", -1), "interval_seconds: expected a positive number"),
    (mutate("taken_at", 1e300), "snapshot.taken_at: expected a finite number"),
    (mutate("pods", [good()["pods"][0]] * (MAX_PODS + 1)), f"more than {MAX_PODS}"),
    (enc(good()).replace(b'"taken_at": 1000.0', b'"taken_at": Infinity'), "Infinity is not"),
    (enc(good()).replace(b'"taken_at": 1000.0', b'"taken_at": NaN'), "NaN is not"),
    (b'{"schema": "other"}', "not a podgpu.snapshot/v1 document (schema 'other')"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2", "not JSON"),
])
def test_malformed_documents_name_what_is_wrong(data: bytes, why: str) -> None:
    with pytest.raises(BadDocument) as info:
        parse(data)
    assert why in str(info.value)


@pytest.mark.parametrize("ch", [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xa0)),
                                "\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u200b",
                                "\u2028", "\u2029", "\ufeff", "\U000e0041", "\ud800"])
def test_every_control_and_format_character_is_escaped(ch: str) -> None:
    out = clean(f"a{ch}b")
    assert ch not in out and out.startswith("a\\") and out.endswith("b")
    out.encode("utf-8")  # a lone surrogate would not even encode


def test_clean_keeps_ordinary_text_and_caps_length() -> None:
    assert clean("ns/gpu-burn-7f9c [bold]ü 中文") == "ns/gpu-burn-7f9c [bold]ü 中文"
    assert clean("x" * 500) == "x" * 200 + "…"


# --- fuzzing: whatever a node sends, parse() says BadDocument or top renders it safely ---------

HOSTILE = st.text(alphabet=st.sampled_from(["a", " ", "\x1b", "\x00", "\n", "\x85", "\x9b",
                                            "\u202e", "\u2066", "\ufeff", "é", "[", "]"]),
                  max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-(10**20), 10**20)
           | st.floats(allow_nan=False) | HOSTILE)
VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(HOSTILE, c, max_size=3), max_leaves=8)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A good document with a few of its values (at any depth) replaced by hostile ones."""
    doc: Any = copy.deepcopy(good())
    for _ in range(draw(st.integers(1, 4))):
        obj = doc
        while True:
            keys = list(obj) if isinstance(obj, dict) else list(range(len(obj)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if isinstance(obj[key], (dict, list)) and obj[key] and draw(st.booleans()):
                obj = obj[key]
                continue
            obj[key] = draw(VALUES)
            break
    return enc(doc)


def no_controls(text: str) -> None:
    assert not [c for c in text if (c < " " and c != "\n") or "\x7f" <= c < "\xa0"
                or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff"], text


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_any_damage_is_bad_or_renders_safely(data: bytes) -> None:
    try:
        view = parse(data)
    except BadDocument as exc:
        no_controls(clean(str(exc), 400))
        return
    text = plain_text([NodeResult("u", view)], TopState(), now=1000.0, width=160)
    no_controls(text)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_any_bytes_are_bad_or_a_document(data: bytes) -> None:
    with contextlib.suppress(BadDocument):
        parse(data)
