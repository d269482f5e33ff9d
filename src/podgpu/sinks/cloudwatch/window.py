"""One EMF interval's samples, per label set and metric, gathered cheaply on the collect thread.

Gauges keep every sample of the interval (1 s collection, 60 s interval: 60 values), so
CloudWatch's Max, Min and percentiles see one-second peaks at per-minute cost. Counters become
deltas as the CloudWatch agent makes them (the CloudWatch documentation): the first sample of a
series only seeds, a value below the previous one is a reset and sends the new value. Deltas are
taken per sample and kept as a distribution, so the interval's Sum is the increase and Max the
largest one-cycle step. Windows are aligned to the wall clock (multiples of the interval since the
epoch), so each label set has one event per interval and a minute's samples land in that minute.

With `sample_every` (`--emf-sample-interval`) only the first cycle of each `sample_every`-second
slot of the clock is kept, as a scrape every `sample_every` seconds would see the series: gauges
get one value per slot and counters one delta per kept sample (the increase since the previous
kept one), so SampleCount, Average, Max and Min are the CloudWatch agent path's at that scrape
interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from podgpu.sinks.cloudwatch.series import COUNTER, Item, LabelKey

Groups = dict[LabelKey, dict[str, list[float]]]


@dataclass(frozen=True, slots=True)
class ClosedWindow:
    """A finished interval: its start (Unix seconds) and the values of each label set."""

    start: float
    groups: Groups = field(default_factory=dict)

    @property
    def timestamp_ms(self) -> int:
        return round(self.start * 1000)


class SlotSampler:
    """Keeps the first cycle of each `every`-second slot of the clock, as a scrape every `every`
    seconds would see a series; `every` 0 keeps every cycle. A cycle whose slot is not after the
    last kept one (same slot, or the clock stepped back) is dropped."""

    __slots__ = ("_slot", "every")

    def __init__(self, every: float) -> None:
        self.every = every
        self._slot: int | None = None

    def take(self, t: float) -> bool:
        """Whether the cycle taken at `t` (Unix seconds) is kept; a kept one claims its slot."""
        if self.every <= 0:
            return True
        slot = math.floor(t / self.every)
        if self._slot is not None and slot <= self._slot:
            return False
        self._slot = slot
        return True


class WindowAccumulator:
    """Collects series into the current window; hands back the previous one when it closes."""

    def __init__(self, interval: float, wanted: Callable[[LabelKey, str], bool],
                 sample_every: float = 0.0) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._interval = interval
        self._sampler = SlotSampler(sample_every)
        self._wanted = wanted
        self._start: float | None = None
        self._groups: Groups = {}
        self._want: dict[LabelKey, dict[str, bool]] = {}
        self._last: dict[tuple[LabelKey, str], tuple[float, float]] = {}
        """Counter series -> (last raw value, start of the window it was seen in)."""

    @property
    def start(self) -> float | None:
        return self._start

    def window_of(self, t: float) -> float:
        return math.floor(t / self._interval) * self._interval

    def add(self, taken_at: float, series: Iterable[tuple[LabelKey, str, list[Item]]]
            ) -> ClosedWindow | None:
        """Add one cycle's series; return the window this cycle closed, if any."""
        start = self.window_of(taken_at)
        closed = None
        if self._start is not None and start > self._start:
            closed = self.close()
        if self._start is None or start > self._start:
            self._start = start
        if not self._sampler.take(taken_at):  # one sample per slot, as a scrape would
            return closed
        # A snapshot older than the open window (clock stepped back) joins the open window.
        groups, last = self._groups, self._last
        for key, kind, items in series:
            want = self._want.get(key)
            if want is None:
                if len(self._want) > 100_000:  # pod churn: forget label sets gone by
                    self._want.clear()
                want = self._want[key] = {}
            per_key = groups.get(key)
            for name, value in items:
                ok = want.get(name)
                if ok is None:
                    ok = want[name] = self._wanted(key, name)
                if not ok:
                    continue
                if kind == COUNTER:
                    prev = last.get((key, name))
                    last[(key, name)] = (value, start)
                    if prev is None:
                        continue  # the first sample seeds the delta, like the agent
                    value = value - prev[0] if value >= prev[0] else value
                if per_key is None:
                    per_key = groups[key] = {}
                values = per_key.get(name)
                if values is None:
                    per_key[name] = [value]
                else:
                    values.append(value)
        return closed

    def close(self) -> ClosedWindow | None:
        """Close the open window (also at shutdown); None when it holds nothing."""
        if self._start is None:
            return None
        start, groups = self._start, self._groups
        self._groups = {}
        # Forget counters not seen in this window or the one before: a series that went away
        # seeds again when it returns (the agent's cache forgets after 5 minutes).
        horizon = start - max(self._interval, self._sampler.every)
        self._last = {k: v for k, v in self._last.items() if v[1] >= horizon}
        return ClosedWindow(start, groups) if groups else None
