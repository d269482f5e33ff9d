"""The API server gone and back. The pod API stand-in sits behind a relay the
test takes down (connection refused, as when the API server restarts) and brings back on the same
address; the relay is the injected fault. The pod watch counts the outage, keeps no unbounded
state (threads and index size counted), and resumes: changes made while it was gone show up."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from podgpu.attribution.kubeapi import KubeConfig
from podgpu.attribution.podwatch import PodWatcher
from tests.harness import wait_for
from tests.integration.kube_api_fake import FakeKubeApi, pod


class Relay:
    """TCP relay 127.0.0.1:port -> target; `down()` closes the listener and every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._socks: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def up(self) -> Relay:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen()
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def down(self) -> None:
        if self._listener is not None:
            # shutdown wakes the accept() blocked in the relay's thread; close alone does not
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._socks.clear()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                a, _ = ls.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            self._socks += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


def test_pod_watch_resumes_after_the_api_server_was_gone(api: FakeKubeApi) -> None:
    api.put(pod("u1", "ml", "a"))
    host, port = api.url.removeprefix("http://").split(":")
    relay = Relay((host, int(port))).up()
    w = PodWatcher("n1", configuration=KubeConfig(host=f"http://127.0.0.1:{relay.port}"),
                   max_backoff_seconds=0.2)
    w.start()
    try:
        wait_for(lambda: set(w.index.by_uid) == {"u1"})
        threads_before = threading.active_count()
        relay.down()  # the API server is gone: refused connections, broken watch
        api.pods.pop("u1")
        api.put(pod("u2", "ml", "b"))
        wait_for(lambda: w.errors >= 2, timeout=20)
        assert set(w.index.by_uid) == {"u1"}  # the last list kept, nothing invented while blind
        failed = w.errors
        wait_for(lambda: w.errors >= failed + 5, what="five more refused attempts")
        # the retries' threads (deadline timers) did not pile up; the relay's own pipes included
        assert threading.active_count() <= threads_before + 4
        relay.up()
        wait_for(lambda: set(w.index.by_uid) == {"u2"}, timeout=30)
        assert len(w.index.by_uid) == 1  # the deleted pod did not linger
    finally:
        w.close()
        relay.down()
