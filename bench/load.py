"""HTTP load against `podgpu serve --simulate`: scrapers beside slowloris and half-open connections.

Entry point only: the body is tests/support/load.py, whose short form runs in the
tests. From the repository root: `python -m bench.load --help`."""

from tests.support.load import main

if __name__ == "__main__":
    raise SystemExit(main())
