"""podgpu.follow decides when followed files changed: by content, through symlinks, with or
without settling; the polling loops are driven by injected waits and counted."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from podgpu.follow import Follower, Version, poll_every, poll_on_loop, read_version, unreadable


class Script:
    """A `look` that returns scripted versions and counts the looks."""

    def __init__(self, *contents: str) -> None:
        self.contents = list(contents)
        self.looks = 0

    def __call__(self, paths: Sequence[str]) -> Version:
        self.looks += 1
        text = self.contents.pop(0) if len(self.contents) > 1 else self.contents[0]
        return tuple((p, text) for p in paths)


def test_without_settle_each_new_version_is_reported_once() -> None:
    look = Script("sha256:a", "sha256:a", "sha256:b", "sha256:b", "sha256:a")
    f = Follower(["x"], look=look)
    assert [f.poll() for _ in range(4)] == [None, (("x", "sha256:b"),), None,
                                            (("x", "sha256:a"),)]
    assert look.looks == 5  # one look at start, one per poll


def test_with_settle_a_version_is_reported_once_two_polls_agree() -> None:
    look = Script("sha256:a", "sha256:b", "sha256:c", "sha256:c", "sha256:c")
    f = Follower(["x"], settle=True, look=look)
    assert [f.poll() is not None for _ in range(4)] == [False, False, True, False]


def test_watch_restarts_from_the_new_paths_as_they_are() -> None:
    look = Script("sha256:a", "sha256:b", "sha256:b")
    f = Follower(["x"], look=look)
    f.watch(["x", "y"])
    assert f.paths == ("x", "y") and f.poll() is None


def test_content_not_stat_decides(tmp_path: Path) -> None:
    p = tmp_path / "list.csv"
    p.write_text("a\n")
    f = Follower([str(p)])
    os.utime(p, ns=(0, 123))  # touched: same bytes
    assert f.poll() is None
    p.write_text("b\n")  # in place, same inode, maybe the same mtime tick
    assert f.poll() is not None


def test_a_configmap_symlink_swap_and_a_removal_are_seen(tmp_path: Path) -> None:
    for v, text in (("v1", "one\n"), ("v2", "two\n")):
        (tmp_path / v).mkdir()
        (tmp_path / v / "list.csv").write_text(text)
    os.symlink("v1", tmp_path / "..data")
    os.symlink("..data/list.csv", tmp_path / "list.csv")
    path = str(tmp_path / "list.csv")
    f = Follower([path])
    os.symlink("v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert f.poll() == read_version([path])
    os.unlink(tmp_path / "..data")
    gone = f.poll()
    assert gone is not None and unreadable(gone) == [path]


def test_a_fifo_reads_as_unreadable_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert unreadable(read_version([str(fifo)])) == [str(fifo)]


def test_poll_every_polls_until_the_wait_says_stop() -> None:
    waits: list[float] = []
    steps: list[int] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) > 3  # the fourth wait is the stop

    poll_every(lambda: steps.append(1), 2.5, wait)
    assert waits == [2.5] * 4 and len(steps) == 3


def test_poll_on_loop_polls_when_kicked_and_survives_a_failing_step() -> None:
    async def main() -> int:
        kick = asyncio.Event()
        calls = 0
        reached = asyncio.Event()

        def step() -> None:
            nonlocal calls
            calls += 1
            if calls == 3:
                reached.set()
            if calls == 1:
                raise RuntimeError("a bug in the first check")

        task = asyncio.create_task(poll_on_loop(step, 3600, kick, what="x"))
        for _ in range(3):
            kick.set()
            while kick.is_set():  # the poller cleared it: that kick's step ran or is running
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.wait_for(reached.wait(), 30)
        task.cancel()
        return calls

    assert asyncio.run(main()) == 3
