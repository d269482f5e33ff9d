"""A local HTTP stand-in for the Kubernetes API podgpu calls (attribution/kubeapi.py): the pod
list/watch (GET /api/v1/pods) with a field selector, watch from a resourceVersion with streamed
JSON events, 410 Gone for a too-old version, injected HTTP errors; GET of single ConfigMaps
(the metric list of `-m NAMESPACE:NAME`) and Nodes; the cluster's Services (GET
/api/v1/services: list in pages and watch). Records every request."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def pod(uid: str, ns: str, name: str, node: str = "n1", labels: dict[str, str] | None = None,
        containers: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod object; `containers` maps container name -> runtime id (bare hex)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"uid": uid, "namespace": ns, "name": name, "labels": labels or {}},
        "spec": {"nodeName": node},
        "status": {"containerStatuses": [
            {"name": n, "containerID": f"containerd://{cid}"} for n, cid in
            (containers or {}).items()]},
    }


def service(ns: str, name: str, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A Service object; `selector` None: a Service without one (it selects nothing)."""
    spec: dict[str, Any] = {"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP"}]}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": name, "uid": f"svc-{ns}-{name}"},
            "spec": spec}


class FakeKubeApi:
    def __init__(self, bind: str = "127.0.0.1") -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.requests: list[dict[str, list[str]]] = []
        self.fail_status: int | None = None
        self.tokens: set[str] | None = None
        """Bearer tokens accepted; None accepts any request (as before auth was checked)."""
        self.auth: list[str] = []
        """The Authorization header of every request, in order ('' when absent)."""
        self.on_unauthorized: Callable[[], object] | None = None
        """Called before a 401 is answered (a test rotates the token file there)."""
        self.gone_below = 0
        self.silent_watches = False
        """Watches answer their headers, then send nothing and never end (a half-open
        connection or a hung API server): only the client's read timeout gets it out."""
        """A watch from a resourceVersion below this is answered HTTP 410 Gone."""
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        """(namespace, name) -> data, served at /api/v1/namespaces/NS/configmaps/NAME."""
        self.nodes: dict[str, dict[str, Any]] = {}
        """name -> Node object, served at /api/v1/nodes/NAME (404 for any other)."""
        self.events: list[tuple[int, dict[str, Any]]] = []
        """Every change with its resourceVersion: a watch from version V replays those after V."""
        self._watchers: list[queue.Queue[dict[str, Any] | None]] = []
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        """(namespace, name) -> Service, listed and watched at /api/v1/services."""
        self.service_events: list[tuple[int, dict[str, Any]]] = []
        self._service_watchers: list[queue.Queue[dict[str, Any] | None]] = []
        self.fail_services: int | None = None
        """An HTTP status every /api/v1/services request is answered with (403: no RBAC)."""
        self.answer_all: tuple[int, bytes] | None = None
        """(status, body) every request is answered with (an API server gone wrong)."""
        server = type("Server", (ThreadingHTTPServer,),
                      {"address_family": socket.AF_INET6 if ":" in bind else socket.AF_INET})
        self._server = server((bind, 0), self._handler())
        self._server.daemon_threads = True
        host = f"[{bind}]" if ":" in bind else bind
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.close_watches()
        self._server.shutdown()
        self._server.server_close()

    # --- changes, broadcast to open watches
    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        ev = {"type": kind, "object": json.loads(json.dumps(obj))}
        if kind != "ERROR":
            self.events.append((self.rv, ev))
        for q in list(self._watchers):
            q.put(ev)

    def put(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            kind = "MODIFIED" if obj["metadata"]["uid"] in self.pods else "ADDED"
            self.pods[obj["metadata"]["uid"]] = obj
            self._emit(kind, obj)

    def delete(self, uid: str) -> None:
        with self.lock:
            self.rv += 1
            obj = self.pods.pop(uid)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit("DELETED", obj)

    def expire(self) -> None:
        """Tell open watches their resourceVersion is gone (HTTP 410 as a watch event)."""
        with self.lock:
            self._emit("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                 "message": "too old resource version"})

    def watch_error(self, code: int, message: str) -> None:
        """An ERROR event with a Status other than 410 on the open pod watches."""
        with self.lock:
            self._emit("ERROR", {"kind": "Status", "code": code, "message": message})

    def bookmark(self) -> None:
        """A BOOKMARK event at a new resourceVersion (no object changed), as the API server
        sends to watches that asked for allowWatchBookmarks."""
        with self.lock:
            self.rv += 1
            self._emit("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": str(self.rv)}})

    def put_service(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            kind = "MODIFIED" if key in self.services else "ADDED"
            self.services[key] = obj
            self._emit_service(kind, obj)

    def delete_service(self, ns: str, name: str) -> None:
        with self.lock:
            self.rv += 1
            obj = self.services.pop((ns, name))
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit_service("DELETED", obj)

    def _emit_service(self, kind: str, obj: dict[str, Any]) -> None:
        ev = {"type": kind, "object": json.loads(json.dumps(obj))}
        self.service_events.append((self.rv, ev))
        for q in list(self._service_watchers):
            q.put(ev)

    def close_watches(self) -> None:
        for q in [*self._watchers, *self._service_watchers]:
            q.put(None)

    def list_requests(self) -> list[dict[str, list[str]]]:
        return [r for r in self.requests if r.get("watch") != ["true"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                url = urlparse(self.path)
                qs = parse_qs(url.query)
                api.requests.append({"path": [url.path], **qs})
                api.auth.append(self.headers.get("Authorization") or "")
                if api.answer_all is not None:
                    self._raw(*api.answer_all)
                    return
                if api.tokens is not None and \
                        self.headers.get("Authorization", "").removeprefix("Bearer ") not in api.tokens:
                    if api.on_unauthorized is not None:
                        api.on_unauthorized()
                    self._json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized",
                                     "message": "Unauthorized"})
                    return
                parts = url.path.strip("/").split("/")
                if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                    node_obj = api.nodes.get(parts[3])
                    self._json(200 if node_obj else 404,
                               node_obj or {"kind": "Status", "code": 404})
                    return
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 \
                        and parts[4] == "configmaps":
                    self._configmap(parts[3], parts[5])
                    return
                if url.path == "/api/v1/services":
                    self._services(qs)
                    return
                if url.path != "/api/v1/pods":
                    self._json(404, {"kind": "Status", "code": 404})
                    return
                if self._injected(api.fail_status):
                    return
                node = qs.get("fieldSelector", [""])[0].removeprefix("spec.nodeName=")
                if qs.get("watch") == ["true"]:
                    self._watch(qs, api.events, api._watchers,
                                lambda obj: obj["spec"]["nodeName"] == node)
                    return
                with api.lock:
                    body = self._list("PodList", qs, [p for p in api.pods.values()
                                                      if p["spec"]["nodeName"] == node])
                self._json(200, body)

            def _services(self, qs: dict[str, list[str]]) -> None:
                """The cluster's Services: a list in pages (`limit`, `continue`) or a watch."""
                if self._injected(api.fail_services):
                    return
                if qs.get("watch") == ["true"]:
                    self._watch(qs, api.service_events, api._service_watchers, lambda o: True)
                    return
                with api.lock:
                    body = self._list("ServiceList", qs, sorted(
                        api.services.values(),
                        key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])))
                self._json(200, body)

            def _injected(self, code: int | None) -> bool:
                """Answers the injected failure `code`, if one is set; whether it did."""
                if code is None:
                    return False
                self._json(code, {"kind": "Status", "code": code, "message": "injected"})
                return True

            def _list(self, kind: str, qs: dict[str, list[str]],
                      items: list[dict[str, Any]]) -> dict[str, Any]:
                """A list at the current resourceVersion (call under `api.lock`), in pages as the
                API server serves `limit` and `continue`."""
                meta: dict[str, Any] = {"resourceVersion": str(api.rv)}
                limit = int(qs.get("limit", ["0"])[0] or 0)
                if limit > 0:
                    start = int(qs.get("continue", ["0"])[0] or 0)
                    if start + limit < len(items):
                        meta["continue"] = str(start + limit)
                        meta["remainingItemCount"] = len(items) - start - limit
                    items = items[start:start + limit]
                return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items}

            def _watch(self, qs: dict[str, list[str]], events: list[tuple[int, dict[str, Any]]],
                       watchers: list[queue.Queue[dict[str, Any] | None]],
                       wanted: Callable[[dict[str, Any]], bool]) -> None:
                """A watch from `resourceVersion`, or 410 Gone for one older than `gone_below`."""
                since = int(qs.get("resourceVersion", ["0"])[0] or 0)
                if since < api.gone_below:
                    self._json(410, {"kind": "Status", "code": 410, "reason": "Expired",
                                     "message": f"too old resource version: {since}"})
                    return
                self._stream(events, watchers, since, float(qs.get("timeoutSeconds", ["30"])[0]),
                             wanted)

            def _configmap(self, ns: str, name: str) -> None:
                """GET one ConfigMap (`-m NAMESPACE:NAME`); 403 when `forbidden`."""
                if self._injected(api.fail_status):
                    return
                with api.lock:
                    data = api.configmaps.get((ns, name))
                if data is None:
                    self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404,
                                     "message": f'configmaps "{name}" not found'})
                    return
                self._json(200, {"kind": "ConfigMap", "apiVersion": "v1",
                                 "metadata": {"namespace": ns, "name": name}, "data": data})

            def _json(self, code: int, body: dict[str, Any]) -> None:
                self._raw(code, json.dumps(body).encode())

            def _raw(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, events: list[tuple[int, dict[str, Any]]],
                        watchers: list[queue.Queue[dict[str, Any] | None]], since: int,
                        timeout: float, wanted: Callable[[dict[str, Any]], bool]) -> None:
                # Chunked, as the real API server streams watches: one JSON event per line.
                q: queue.Queue[dict[str, Any] | None] = queue.Queue()
                with api.lock:
                    for rv, past in events:
                        if rv > since:
                            q.put(past)
                    watchers.append(q)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + timeout
                try:
                    while api.silent_watches:
                        time.sleep(0.05)
                    while time.monotonic() < deadline:
                        try:
                            ev = q.get(timeout=0.05)
                        except queue.Empty:
                            continue
                        if ev is None:
                            break
                        obj = ev["object"]
                        if ev["type"] not in ("ERROR", "BOOKMARK") and not wanted(obj):
                            continue
                        self._chunk(json.dumps(ev).encode() + b"\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
                finally:
                    watchers.remove(q)
                    self.close_connection = True

        return Handler
