"""The accounting state of a running `podgpu serve`: one `observe()` per snapshot on the collect
thread; its `families()` are a MetricSource rendered with /metrics from the same thread.

The only mutable part of accounting: it holds the last snapshot and the state `advance` returned
for it, and a cache of each holder's label pairs bounded by the live holders.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from podgpu.accounting.integrate import Options, State, advance
from podgpu.accounting.render import emf_items, families
from podgpu.accounting.shares import FIELDS, HolderKey
from podgpu.fields.catalog import Field, lookup
from podgpu.model import Snapshot
from podgpu.settings import AccountingSettings
from podgpu.sinks.prometheus.labels import LabelOptions, Pairs
from podgpu.sinks.prometheus.source import Family


class UsesFields(Protocol):
    def use_fields(self, fields: tuple[Field, ...]) -> None: ...


def build_accountant(settings: AccountingSettings, labels: LabelOptions) -> Accountant | None:
    """The accountant of `podgpu serve`, None with --accounting=false."""
    if not settings.enabled:
        return None
    return Accountant(labels, Options(grace_seconds=settings.grace_seconds,
                                      max_gap_seconds=settings.max_gap_seconds))


def with_accounting_fields(fields: tuple[Field, ...]) -> tuple[Field, ...]:
    """`fields` plus the ones accounting reads (shares.FIELDS) that the metric list leaves out:
    they are collected but not exported, since the exposition prints the list's rows only."""
    have = {f.name for f in fields}
    extra = tuple(f for name in FIELDS if name not in have and (f := lookup(name)) is not None)
    return fields + extra


class _WithAccountingFields:
    """A collector whose metric list is switched (SIGHUP) keeps the fields accounting reads."""

    def __init__(self, collector: UsesFields) -> None:
        self._collector = collector

    def use_fields(self, fields: tuple[Field, ...]) -> None:
        self._collector.use_fields(with_accounting_fields(fields))


class Accountant:
    """Integrates every snapshot it is shown; its totals are a metric family source."""

    def __init__(self, labels: LabelOptions, options: Options = Options()) -> None:  # noqa: B008
        self._labels = labels
        self._options = options
        self._prev: Snapshot | None = None
        self.state = State()
        self._cache: dict[tuple[HolderKey, int], Pairs] = {}

    def observe(self, snapshot: Snapshot) -> None:
        """Advance by one snapshot. A snapshot not newer than the last (a clock stepped back) only
        refreshes who holds what; it integrates nothing."""
        prev = self._prev
        if prev is not None and snapshot.taken_at <= prev.taken_at:
            prev = None
        self.state = advance(self.state, prev, snapshot, self._options)
        self._prev = snapshot

    def fields_target(self, collector: UsesFields) -> UsesFields:
        """What a metric-list switch should be applied to: the collector, keeping accounting's
        fields."""
        return _WithAccountingFields(collector)

    def families(self) -> list[Family]:
        """The counters as a MetricSource (sinks/prometheus/source.py renders them)."""
        if len(self._cache) > 2 * len(self.state.entries) + 64:
            self._cache.clear()
        return families(self.state, self._labels, self._cache)

    def emf_items(self) -> Iterator[tuple[Pairs, list[tuple[str, float]]]]:
        """(label pairs, [(counter, total)]) per holder for the EMF sink."""
        return emf_items(self.state, self._labels)
