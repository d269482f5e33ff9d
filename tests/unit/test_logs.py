"""--debug must not turn on libraries' DEBUG output, which carries credentials (SECURITY.md)."""

from __future__ import annotations

import io
import logging
import sys

from podgpu import logs


def test_debug_logs_podgpu_but_not_library_secrets(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logs.configure(debug=True)
        logging.getLogger("podgpu.collect").debug("podgpu detail")
        # what botocore and the Kubernetes client log at DEBUG
        logging.getLogger("botocore.endpoint").debug("headers={'X-Amz-Security-Token': b'SECRET1'}")
        logging.getLogger("kubernetes.client.rest").debug("response body: SECRET2")
        logging.getLogger("urllib3.connectionpool").debug("SECRET3")
        logging.getLogger("botocore.credentials").info("Found credentials in environment")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    out = buf.getvalue()
    assert "podgpu detail" in out and "Found credentials" in out
    assert "SECRET" not in out
