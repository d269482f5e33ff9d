"""The metric list file is followed while running."""

from __future__ import annotations

import os
from pathlib import Path

from podgpu.fields.listfollow import ListFollower


def _bump(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # coarse-mtime filesystems


def test_a_change_is_acted_on_once_it_has_settled(tmp_path: Path) -> None:
    f = tmp_path / "list.csv"
    f.write_text("a\n")
    calls: list[str] = []
    follower = ListFollower(str(f), lambda: calls.append(f.read_text()))
    assert not follower.check()  # nothing changed since start
    _bump(f, "b\n")
    assert not follower.check()  # changed: wait one poll for it to settle
    assert follower.check() and calls == ["b\n"]
    assert not follower.check()  # no repeat
    _bump(f, "c\n")
    follower.check()
    _bump(f, "d\n")  # still being written: not read half-way
    assert not follower.check()
    assert follower.check() and calls == ["b\n", "d\n"]
    assert follower.changes == 2


def test_a_configmap_style_symlink_swap_is_seen(tmp_path: Path) -> None:
    """kubelet updates a ConfigMap volume by pointing `..data` at a new directory."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "list.csv").write_text("one\n")
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "list.csv").write_text("two\n")
    os.symlink("v1", tmp_path / "..data")
    os.symlink("..data/list.csv", tmp_path / "list.csv")
    calls: list[str] = []
    follower = ListFollower(str(tmp_path / "list.csv"),
                            lambda: calls.append((tmp_path / "list.csv").read_text()))
    os.symlink("v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    follower.check()
    assert follower.check() and calls == ["two\n"]


def test_removal_keeps_the_list_and_a_failing_reload_does_not_stop_following(tmp_path: Path) -> None:
    f = tmp_path / "list.csv"
    f.write_text("a\n")
    calls = []

    def boom() -> None:
        calls.append(1)
        raise RuntimeError("reload bug")

    follower = ListFollower(str(f), boom)
    f.unlink()
    follower.check()
    assert not follower.check() and calls == []
    f.write_text("back\n")
    follower.check()
    assert follower.check() and calls == [1]  # the exception was logged, not raised
