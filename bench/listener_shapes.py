"""The listener's memory budget under each shape of client that held memory, and all at once.

Entry point only: the body is tests/support/listener_shapes.py. From the repository root:
`python -m bench.listener_shapes --help`."""

from tests.support.listener_shapes import main

if __name__ == "__main__":
    raise SystemExit(main())
