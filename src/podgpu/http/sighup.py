"""SIGHUP: reload instead of dying, for as long as an app serves (podgpu.reload holds what is
reloaded: the metric list; http.websecurity the web config)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
from collections.abc import Callable, Sequence

from podgpu.http.app import App
from podgpu.signals import off_signal, on_signal

log = logging.getLogger("podgpu.reload")


def install_sighup(app: App, *, blocking: Sequence[Callable[[], object]] = (),
                   on_loop: Sequence[Callable[[], object]] = ()) -> None:
    """On every SIGHUP once `app` serves: `on_loop` callables run on the event loop (they only
    set flags, e.g. the web config's reload request), `blocking` ones (a list file, the
    ConfigMap through the API) on one worker thread, in order, so a slow read never stalls a
    scrape. Only a process's main thread can own signals; elsewhere (an agent
    started by a test) nothing is installed."""
    worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="podgpu-hup")

    def guarded(reload: Callable[[], object]) -> None:
        try:
            reload()
        except Exception:  # a reload bug must not take the server down
            log.exception("SIGHUP reload failed")

    pending = threading.Event()
    """A reload is queued and has not started: later SIGHUPs join it (a storm is one reload)."""

    def reload_all() -> None:
        pending.clear()
        for reload in blocking:
            guarded(reload)

    def on_hup() -> None:
        if pending.is_set():
            return
        pending.set()
        log.info("SIGHUP received: reloading")
        for reload in on_loop:
            guarded(reload)
        worker.submit(reload_all)

    async def register(_app: App) -> None:
        if threading.current_thread() is threading.main_thread():
            on_signal(asyncio.get_running_loop(), signal.SIGHUP, on_hup)

    async def unregister(_app: App) -> None:
        if threading.current_thread() is threading.main_thread():
            off_signal(asyncio.get_running_loop(), signal.SIGHUP)  # ignored: never killed by it
        worker.shutdown(wait=False, cancel_futures=True)

    app.on_startup.append(register)
    app.on_cleanup.append(unregister)
