"""The accounting state of a running `podgpu serve`: one `observe()` per snapshot on the collect
thread, rendered with the exposition from the same thread.

The only mutable part of accounting: it holds the last snapshot and the state `advance` returned
for it, and a label-text cache bounded by the live holders.
"""

from __future__ import annotations

from collections.abc import Iterator

from podgpu.accounting.integrate import Options, State, advance
from podgpu.accounting.render import emf_items, render_families
from podgpu.accounting.shares import HolderKey
from podgpu.model import Snapshot
from podgpu.sinks.prometheus.labels import LabelOptions, Pairs


class Accountant:
    """Integrates every snapshot it is shown; renders the totals as a metric family source."""

    def __init__(self, labels: LabelOptions, options: Options = Options()) -> None:  # noqa: B008
        self._labels = labels
        self._options = options
        self._prev: Snapshot | None = None
        self.state = State()
        self._cache: dict[tuple[HolderKey, int], tuple[str, ...]] = {}

    def observe(self, snapshot: Snapshot) -> None:
        """Advance by one snapshot. A snapshot not newer than the last (a clock stepped back) only
        refreshes who holds what; it integrates nothing."""
        prev = self._prev
        if prev is not None and snapshot.taken_at <= prev.taken_at:
            prev = None
        self.state = advance(self.state, prev, snapshot, self._options)
        self._prev = snapshot

    def render(self) -> str:
        """The counter families for /metrics (text format 0.0.4)."""
        if len(self._cache) > 2 * len(self.state.entries) + 64:
            self._cache.clear()
        return render_families(self.state, self._labels, self._cache)

    def emf_items(self) -> Iterator[tuple[Pairs, list[tuple[str, float]]]]:
        """(label pairs, [(counter, total)]) per holder for the EMF sink."""
        return emf_items(self.state, self._labels)
