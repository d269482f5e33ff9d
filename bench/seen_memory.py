"""What the listener's remembered request heads (http.wire.Seen) hold at most: Seen.MAX_HEADS
heads read by h11, each as many header fields as fit in Seen.MAX_BYTES, measured with
tracemalloc for several splits of those bytes.

    .venv/bin/python -m bench.seen_memory
"""

from __future__ import annotations

import json
import tracemalloc

import h11

from podgpu.http.guard import MAX_HEADERS
from podgpu.http.wire import Seen, examine


def held(fields: int, value: int) -> int | None:
    """Bytes a full Seen holds with heads of `fields` fields of `value`-byte values, or None
    when such a head does not fit."""
    tracemalloc.start()
    seen = Seen()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(Seen.MAX_HEADS):
        lines = [b"GET /metrics?%d HTTP/1.1\r\n" % i, b"Host: x\r\n"]
        lines += [b"a%d: %s\r\n" % (j, b"v" * value) for j in range(fields)]
        data = b"".join(lines) + b"\r\n"
        if len(data) > Seen.MAX_BYTES:
            tracemalloc.stop()
            return None
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(data)
        event = conn.next_event()
        assert isinstance(event, h11.Request)
        head = examine(event, MAX_HEADERS)
        assert not isinstance(head, str) and not head.body
        seen.add(data, head)
        assert seen.get(data) is head
        del conn
    total = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return total


def main() -> int:
    out = {}
    for fields, value in ((MAX_HEADERS - 1, 1), (MAX_HEADERS - 1, 6), (40, 12), (20, 35),
                          (5, 170), (1, 950)):
        got = held(fields, value)
        if got is not None:
            out[f"{fields + 1} fields, values of {value} bytes"] = round(got / 1024, 1)
    print(json.dumps({"max_heads": Seen.MAX_HEADS, "max_bytes": Seen.MAX_BYTES,
                      "held_kib": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
