"""Logging set-up (text or JSON lines on stderr) and log-once for recurring conditions."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

_MAX_ONCE_KEYS = 4096
QUIET_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3", "kubernetes", "grpc", "asyncio",
                   "grpclib", "h2", "hpack")  # the kubelet client's HTTP/2 stack
"""Kept at INFO under --debug: botocore's DEBUG prints request headers (an STS session token),
the Kubernetes client's prints response bodies (pod specs with env values) (SECURITY.md)."""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(*, debug: bool = False, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for name in QUIET_LIBRARIES:  # --debug is for podgpu; their DEBUG output carries secrets
        logging.getLogger(name).setLevel(logging.INFO)


_seen: set[str] = set()
_seen_lock = threading.Lock()


def log_once(logger: logging.Logger, level: int, key: str, msg: str, *args: object) -> None:
    """Log `msg` the first time `key` is seen; the key set is bounded."""
    with _seen_lock:
        if key in _seen or len(_seen) >= _MAX_ONCE_KEYS:
            return
        _seen.add(key)
    logger.log(level, msg, *args)
