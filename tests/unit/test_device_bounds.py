"""`-d` ranges are bounded before a list of numbers is built: before the bound,
`-d g:0-99999999999` raised MemoryError with a traceback and `g:0-299999999` took 11 GB."""

from __future__ import annotations

import subprocess
import sys

import pytest

from podgpu.model.selection import MAX_INDEX, parse_device_selection


@pytest.mark.parametrize("text", ["g:0-99999999999", "i:0-299999999", f"g:{MAX_INDEX + 1}",
                                  "g:0," + "9" * 5000, "g+i:0-100000"])
def test_absurd_ranges_are_refused_with_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=f"indexes go up to {MAX_INDEX}"):
        parse_device_selection(text)


def test_the_largest_accepted_range_is_small() -> None:
    sel = parse_device_selection(f"g:0-{MAX_INDEX}")
    assert sel.gpus == tuple(range(MAX_INDEX + 1))


def test_through_the_cli_it_is_one_line_and_exit_2() -> None:
    res = subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "1",
                          "-d", "g:0-99999999999"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("podgpu: ") and "--devices" in last and str(MAX_INDEX) in last, last
