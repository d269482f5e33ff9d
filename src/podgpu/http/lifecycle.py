"""Run a server coroutine on this thread's event loop and stop it from any thread.

The collect loop (serve) and the tick loop (emf) run on their own threads; when one dies, the
server must stop and the process exit 1. That goes through the event loop (the serving task is
cancelled with `call_soon_threadsafe`, so http.server closes its listener and finishes in-flight
requests as on SIGTERM), not through a signal raised at the process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("podgpu")


class Stopper:
    """`run(coro)` blocks until the coroutine returns or `stop(reason)` is called."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[Any] | None = None
        self.reason: str | None = None
        """Why `stop` was called; None while nothing asked the server to stop."""

    def run(self, coro: Coroutine[Any, Any, Any]) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.ensure_future(coro)
            if self.reason is not None:  # stop() came before the task existed
                self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                log.info("stopping: %s", self.reason)

        asyncio.run(main())

    def stop(self, reason: str) -> None:
        """Thread-safe; idempotent (the first reason is kept)."""
        if self.reason is None:
            self.reason = reason
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
