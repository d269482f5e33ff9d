"""Attacks on the listener before a request completes, beside well-behaved scrapers.

Entry point only: the body is tests/support/listener_attacks.py, whose short form runs in the
tests. From the repository root: `python -m bench.listener_attacks --help`."""

from tests.support.listener_attacks import main

if __name__ == "__main__":
    raise SystemExit(main())
