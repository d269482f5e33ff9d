from __future__ import annotations

import pytest

from podgpu.http.server import accepts_gzip


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("", False),
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("deflate", False),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("GZIP;Q=0.5", True),
        ("*", True),
        ("*;q=0", False),
        ("identity, *;q=0.1", True),
        ("gzip;q=0, *;q=1", False),
        ("x-gzip", True),
        ("gzip;q=bogus", False),
    ],
)
def test_accept_encoding_q_values(header: str, expected: bool) -> None:
    assert accepts_gzip(header) is expected
