"""Per-pod GPU accounting: allocated, used, energy and memory integrated on the node.

`shares` turns one snapshot into per-holder rates (pure), `integrate.advance` turns a snapshot
pair and the previous totals into new totals (pure), `render` turns them into Prometheus counter
families (the MetricSource form that sinks/prometheus/source.py renders) and EMF series, and
`source.Accountant` keeps the current state for `podgpu serve`.
See docs/accounting.md for the definitions.

Decision record: docs/decisions/0017-accounting-on-the-node.md.
"""

from podgpu.accounting.integrate import Entry, Options, State, advance
from podgpu.accounting.source import Accountant, build_accountant, with_accounting_fields

__all__ = ["Accountant", "Entry", "Options", "State", "advance", "build_accountant",
           "with_accounting_fields"]
