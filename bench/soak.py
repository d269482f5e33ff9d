"""Soak: `podgpu serve --simulate 8 -k` for an hour against a kubelet stand-in with churning pods.

Entry point only: the body is tests/support/soak.py, whose short form runs in the
tests. From the repository root: `python -m bench.soak --help`."""

from tests.support.soak import main

if __name__ == "__main__":
    raise SystemExit(main())
