"""One list-then-watch loop for every kind of Kubernetes object podgpu follows (pods of this
node, the cluster's Services): a kind is a parser and a store on it (a `Reflector` subclass
giving `parse`, `replace` and `apply`).

It follows the API's contract for efficient change detection: list in pages (`limit`, then the
`continue` token), each page capped in bytes and under one deadline; watch from the list's
resourceVersion with bookmarks asked for (they advance the version without a change, so a
re-opened watch rarely replays or expires), ended by a server-side timeout and re-opened from the
last version seen; a 410 Gone (as the answer or as an ERROR event) means that version was
compacted away: list again. A watch that ends within a second is followed by a second's pause
(a proxy that closes watches at once must not make it spin). Every failure, configuration
included (apiserver.py), is counted, given a reason for /health and retried with exponential
backoff up to `max_backoff_seconds`; nothing escapes the thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from podgpu.attribution.apijson import mapping, sequence
from podgpu.attribution.apiserver import ApiCaller, ApiUser
from podgpu.attribution.kubeapi import Connection, KubeApiError, lines
from podgpu.peers.backoff import BackoffLoop

T = TypeVar("T")

WATCH_TIMEOUT_SECONDS = 300
"""Server-side watch timeout; the watch is re-opened from the last resourceVersion after it."""
WATCH_READ_MARGIN_SECONDS = 30.0
"""A whole watch ends by its server-side timeout plus this (s): a server that went silent
(a half-open connection) is noticed, one that ends the watch on time is not cut short."""
LIST_TIMEOUT_SECONDS = 60.0
"""Deadline of one list page (s): connect and every read."""
LIST_PAGE = 100
"""Objects asked for per list page: a page's parsed JSON is the list's memory peak."""
MAX_LIST_PAGE_BYTES = 16 * 1024 * 1024
"""Of one list page read (100 objects of 160 KiB each; a pod's JSON is typically 5-20 KiB, a
Service's 1-2 KiB): past it the page is refused, counted as a failed list and retried."""
ANTI_SPIN_SECONDS = 1.0
"""A watch that ends sooner than this is followed by a pause this long."""
MAX_ERROR_MESSAGE = 300
"""Characters of a watch's ERROR event message kept in the reason."""


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class Reflector(ApiUser, Generic[T]):
    """Lists and watches `path` (with `selector`, e.g. a field selector) on a daemon thread.

    A subclass is the kind: `parse` (an object as the API serves it -> T, or None to skip it),
    `listed` (whether a listed one is kept), `replace` (the whole list: at most a page more
    than `cap` objects, and how many more the list had), `apply` (one ADDED, MODIFIED or
    DELETED object) and, if it must, `failed` (a failed list or watch). `api` says how the
    calls go (/health).
    """

    def __init__(self, path: str, api: ApiCaller, *, cap: int, thread_name: str,
                 selector: Mapping[str, str] | None = None, list_page: int = LIST_PAGE,
                 watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
                 watch_read_margin_seconds: float = WATCH_READ_MARGIN_SECONDS,
                 max_backoff_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None) -> None:
        """`clock` (monotonic seconds) times a watch; `wait(seconds)` pauses the thread and says
        whether it was stopped meanwhile (default: the loop's own; tests record it)."""
        super().__init__(api)
        self.path = path
        self.cap = cap
        self._selector = dict(selector or {})
        self._page = list_page
        self._watch_timeout = watch_timeout_seconds
        self._read_margin = watch_read_margin_seconds
        self._synced = threading.Event()
        self._clock = clock
        self._loop = BackoffLoop(self.step, name=thread_name, first=min(1.0, max_backoff_seconds),
                                 cap=max_backoff_seconds, every=0.0, wait=wait)
        self._conn: Connection | None = None
        self._listed = False
        self.resource_version = ""
        """The last resourceVersion seen (list, event or bookmark): where a watch resumes."""

    # --- the kind
    def parse(self, obj: Mapping[str, Any]) -> T | None:
        raise NotImplementedError

    def listed(self, item: T) -> bool:
        """Whether a listed object is kept (and counts toward `cap`); all by default."""
        return True

    def replace(self, items: list[T], more: int) -> None:
        raise NotImplementedError

    def apply(self, event: str, item: T) -> None:
        raise NotImplementedError

    def failed(self, exc: Exception) -> None:
        """A list or watch failed with `exc`: counted and said (`api`); a kind may also drop
        what it keeps."""
        self.api.failed(exc)

    # --- the thread
    def start(self, wait_seconds: float = 1.0) -> None:
        """Start listing and watching; wait up to `wait_seconds` for the first list (or the
        first failure)."""
        self._loop.start()
        if wait_seconds > 0:
            self._synced.wait(wait_seconds)

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the first list (or the first failure); True once done."""
        return self._synced.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        self._loop.stop()
        conn = self._conn
        if conn is not None:
            conn.interrupt()
        self._loop.join(timeout)
        if conn is not None:
            conn.close()

    def step(self) -> bool:
        """One list or one watch, the attempt of the thread's BackoffLoop (podgpu.peers): True
        when it went well (the next step follows at once), False after a failure (counted and
        said; the loop backs off, or ends when there is no API at all). Never raises."""
        try:
            if self._conn is None:
                self._conn = self.connect_or_end(self._loop)
                if self._conn is None:
                    self._synced.set()  # a failure ends the wait for the first list too
                    return False
            if not self._listed:
                self._list(self._conn)
                self._listed = True
                self.api.succeeded()
                self._synced.set()
            else:
                started = self._clock()
                self._watch(self._conn)
                if self._clock() - started < ANTI_SPIN_SECONDS:  # a proxy closing watches
                    self._loop.wait(ANTI_SPIN_SECONDS)  # at once must not make it spin
            return True
        except Gone:
            self._listed = False
            return True
        except Exception as exc:
            self._listed = False
            if self._loop.stopped:
                return True
            self.failed(exc)
            self._synced.set()
            return False

    def _list(self, conn: Connection) -> None:
        """The whole list in pages; more than `cap` parsed objects end it (the rest would not
        be kept either: their number, from remainingItemCount, goes to `replace`)."""
        items: list[T] = []
        token = ""
        more = 0
        meta: Mapping[str, Any] = {}
        while not self._loop.stopped:
            query = {**self._selector, "limit": str(self._page)}
            if token:
                query["continue"] = token
            body = conn.get_json(self.path, query, timeout=LIST_TIMEOUT_SECONDS,
                                 max_bytes=MAX_LIST_PAGE_BYTES)
            for obj in sequence(body.get("items")):
                item = self.parse(obj) if isinstance(obj, dict) else None
                if item is not None and self.listed(item):
                    items.append(item)
            meta = mapping(body.get("metadata"))
            token = str(meta.get("continue") or "")
            if not token:
                break
            if len(items) > self.cap:
                rest = meta.get("remainingItemCount")
                more = rest if isinstance(rest, int) and rest > 0 else 0
                break
        if self._loop.stopped:
            return
        self.replace(items, more)
        self.resource_version = str(meta.get("resourceVersion") or "")

    def _watch(self, conn: Connection) -> None:
        query = {**self._selector, "watch": "true", "resourceVersion": self.resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(self._watch_timeout)}
        limit = self._watch_timeout + self._read_margin
        # the whole watch (its answer's head included) ends by the limit, however slowly the
        # server sends
        with conn.deadline(limit):
            try:
                resp = conn.open(self.path, query, timeout=limit)
            except KubeApiError as exc:
                if exc.status == 410:
                    raise Gone() from None
                raise
            try:
                for line in lines(resp):
                    if self._loop.stopped:
                        break
                    self._event(json.loads(line))
            finally:
                # a new connection per watch: a stream left mid-way cannot be reused (and API
                # servers often close a connection after a watch anyway)
                resp.close()
                conn.close()

    def _event(self, event: Any) -> None:
        kind, obj = mapping(event).get("type"), mapping(event).get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"a watch event without an object: {str(event)[:100]}")
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            message = str(obj.get("message") or obj)[:MAX_ERROR_MESSAGE]
            raise RuntimeError(f"watch error: {message}")
        version = mapping(obj.get("metadata")).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            item = self.parse(obj)
            if item is not None:
                self.apply(kind, item)
