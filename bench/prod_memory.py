"""Production memory of `podgpu serve`: RSS, threads, open fds and CPU over a run.

Entry point only: the body is tests/support/prod_memory.py, whose short form runs in the
tests. From the repository root: `python -m bench.prod_memory --help`."""

from tests.support.prod_memory import main

if __name__ == "__main__":
    raise SystemExit(main())
