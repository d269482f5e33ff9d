"""Fault figures: the kubelet gone for minutes and back, against `podgpu serve`.

Entry point only: the body is tests/support/faults.py, whose short form runs in the
tests. From the repository root: `python -m bench.faults --help`."""

from tests.support.faults import main

if __name__ == "__main__":
    raise SystemExit(main())
