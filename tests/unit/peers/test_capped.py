"""The one capped body reader: the cap holds before and after gzip, an announced length over it
is refused before reading, and a passed deadline ends the read."""

from __future__ import annotations

import gzip
import io
import random
from collections.abc import Callable

import pytest

from podgpu.peers.capped import OverCap, Undecodable, read_capped
from podgpu.peers.deadline import Deadline

KIB = 1024


class Source:
    """`read(n)` over bytes, counting what was asked and given."""

    def __init__(self, data: bytes) -> None:
        self._io = io.BytesIO(data)
        self.given = 0
        self.asked: list[int] = []

    def read(self, n: int) -> bytes:
        self.asked.append(n)
        out = self._io.read(n)
        self.given += len(out)
        return out


def test_a_body_under_the_cap_is_read_whole() -> None:
    data = bytes(range(256)) * 1000
    assert read_capped(Source(data).read, len(data)) == data


def test_a_body_over_the_cap_is_cut_one_byte_past_it() -> None:
    src = Source(b"x" * (10 * 1024 * KIB))
    with pytest.raises(OverCap, match=r"^answer over the 65536-byte limit$"):
        read_capped(src.read, 64 * KIB, chunk=16 * KIB)
    assert src.given == 64 * KIB + 1  # never read further
    assert max(src.asked) <= 16 * KIB


def test_an_announced_length_over_the_cap_is_refused_before_reading() -> None:
    src = Source(b"x" * 10)
    with pytest.raises(OverCap, match=r"^answer of 2000000 bytes is over the 1000-byte limit$"
                       ) as info:
        read_capped(src.read, 1000, length=" 2000000 ")
    assert src.asked == [] and info.value.size == 2_000_000 and info.value.limit == 1000


def test_a_gzip_bomb_costs_the_cap_not_its_inflated_size() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * KIB))  # 64 MiB of zeros in ~64 KB
    assert len(bomb) < 1024 * KIB
    with pytest.raises(OverCap, match=r"^answer over the 1048576-byte limit after gzip "
                                      r"decompression$"):
        read_capped(Source(bomb).read, 1024 * KIB, gzip=True)


def test_gzip_under_the_cap_inflates_and_broken_gzip_is_named() -> None:
    text = b"metric 1\n" * 1000
    packed = gzip.compress(text)
    assert read_capped(Source(packed).read, len(text), gzip=True) == text
    with pytest.raises(Undecodable, match=r"^undecodable gzip answer: truncated$"):
        read_capped(Source(packed[:-20]).read, len(text), gzip=True)
    with pytest.raises(Undecodable, match=r"^undecodable gzip answer: "):
        read_capped(Source(b"\x1f\x8b" + b"not gzip at all" * 10).read, len(text), gzip=True)


def test_the_compressed_bytes_are_held_to_the_cap_too() -> None:
    noise = random.Random(7).randbytes(300 * KIB)  # does not compress
    with pytest.raises(OverCap, match=r"^answer over the 102400-byte limit$"):
        read_capped(Source(gzip.compress(noise)).read, 100 * KIB, gzip=True)


def hand_deadline() -> tuple[Deadline, Callable[[], None]]:
    fire: list[Callable[[], None]] = []

    def start(_seconds: float, f: Callable[[], None]) -> Callable[[], None]:
        fire.append(f)
        return lambda: None
    return Deadline(1.5, start_timer=start), fire[0]


def test_a_passed_deadline_ends_the_read_between_two_reads() -> None:
    deadline, fire = hand_deadline()
    src = Source(b"y" * 100)

    def read(n: int) -> bytes:
        chunk = src.read(min(n, 10))
        if src.given == 30:
            fire()
        return chunk
    with pytest.raises(TimeoutError, match=r"^no complete answer within 1.5 s$"):
        read_capped(read, 1000, deadline=deadline)
    assert src.given == 30


def test_an_end_after_the_deadline_passed_is_not_taken_for_the_whole_body() -> None:
    # the deadline's shutdown makes the next read return b"", as a clean end would
    deadline, fire = hand_deadline()
    chunks = [b"half of it", b""]

    def read(_n: int) -> bytes:
        chunk = chunks.pop(0)
        if not chunk:
            fire()
        return chunk
    with pytest.raises(TimeoutError):
        read_capped(read, 1000, deadline=deadline)
