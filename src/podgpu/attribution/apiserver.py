"""The one way podgpu reaches the Kubernetes API server, and how each caller's calls go.

Every caller (the pod watch, the Service watch, the Node lookup, the `-m` ConfigMap) gets its
`Connection` from `connect`: the configuration it was given (tests point it at a stand-in) or
the pod's own (`kubeapi.in_cluster`). Every failure on the way is one exception with a reason:
- `NotInCluster`: no API to reach (not in a pod, no mounted service account); the caller is
  off, not failing;
- `ApiAccessError`: the service account's CA bundle cannot be loaded (unreadable, not PEM, no
  certificate in it) or the API address is not a URL;
- anything a call raises (the token file unreadable, a refused or broken connection, TLS, a
  deadline, an answer over its cap or not JSON, an HTTP error status), which `reason` words.

`ApiCaller` keeps one background caller's state for /health: `status` (`starting`, `ok`,
`failing: <why>`, `unavailable: <why>`), a count of failed calls, and one log line per distinct
reason (at most MAX_LOGGED_REASONS), plus one when it works again. `ApiUser` is what each
caller's thread object shares around its `ApiCaller` (the watches, the Node lookup).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from podgpu.attribution.kubeapi import (
    ApiAccessError,
    Connection,
    KubeApiError,
    KubeConfig,
    NotInCluster,
    describe,
    in_cluster,
)
from podgpu.peers.backoff import BackoffLoop

log = logging.getLogger(__name__)

MAX_LOGGED_REASONS = 16
"""Distinct failure reasons logged per caller; later new ones are counted and shown, not logged
(a reason can carry a changing detail, so the set must be bounded)."""


def connect(configuration: KubeConfig | None = None,
            environ: Mapping[str, str] | None = None) -> Connection:
    """A connection to the API server: `configuration`, or the pod's own read from `environ`
    (default: the process environment) and the mounted service account. Raises NotInCluster
    (no API here) or ApiAccessError (the CA bundle or the address is wrong); nothing else."""
    cfg = configuration
    if cfg is None:
        cfg = in_cluster(os.environ if environ is None else environ)
    return Connection(cfg)


def reason(exc: BaseException, rbac: str) -> str:
    """A short reason for a failed call, for the log and /health; `rbac` names what the
    service account must be allowed (`get/list/watch on pods`), said on a 403."""
    if isinstance(exc, KubeApiError):
        if exc.status == 403:
            return f"403 Forbidden: the service account needs {rbac}"
        if exc.status == 401:
            return "401 Unauthorized: the service-account token was refused"
    if isinstance(exc, (NotInCluster, ApiAccessError)):
        return str(exc)
    return describe(exc)


class ApiCaller:
    """One background caller of the API server: `what` it does (`pod list/watch`), what the
    service account needs for it (`rbac`), what is missing meanwhile (`without`, for the log).
    Not thread-safe for writers: only the caller's thread calls `failed` and `succeeded`."""

    def __init__(self, what: str, *, rbac: str, without: str,
                 configuration: KubeConfig | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.what = what
        self._rbac = rbac
        self._without = without
        self._configuration = configuration
        self._environ = environ
        self._logged: set[str] = set()
        self.errors = 0
        """Failed calls (a configuration that cannot work counts once)."""
        self.reason = ""
        """Why the last call failed, or why there is no API; '' while it works."""
        self.status = "starting"

    @property
    def available(self) -> bool:
        """False once it is known there is no API to reach (NotInCluster)."""
        return not self.status.startswith("unavailable")

    def connect(self) -> Connection | None:
        """`connect()` with this caller's configuration; None after saying why (NotInCluster:
        unavailable; a bad CA bundle or address: failed, counted)."""
        try:
            return connect(self._configuration, self._environ)
        except NotInCluster as exc:
            self.unavailable(str(exc))
        except ApiAccessError as exc:
            self.failed(exc)
        return None

    def unavailable(self, why: str) -> None:
        """No API to reach at all: said once, not counted as a failure."""
        self.reason = why
        self.status = f"unavailable: {why}"
        log.warning("no Kubernetes API access for the %s (%s): %s", self.what, why,
                    self._without)

    def failed(self, exc: BaseException) -> str:
        """Count a failed call and say why (once per distinct reason); the reason."""
        self.errors += 1
        why = reason(exc, self._rbac)
        self.reason = why
        self.status = f"failing: {why}"
        if why not in self._logged and len(self._logged) < MAX_LOGGED_REASONS:
            self._logged.add(why)
            log.warning("%s failed (%s); retried with backoff, meanwhile %s", self.what, why,
                        self._without)
        return why

    def succeeded(self) -> None:
        if self.status.startswith("failing"):
            log.info("%s works again", self.what)
        self._logged.clear()
        self.reason = ""
        self.status = "ok"

    def health(self) -> dict[str, object]:
        """This caller's entry in /health: status and failed calls."""
        return {"status": self.status, "errors": self.errors}


class ApiUser:
    """A background user of the API server on a BackoffLoop, around its `ApiCaller` (`api`):
    `errors`, `reason`, `available` and `health()` read through to it."""

    def __init__(self, api: ApiCaller) -> None:
        self.api = api

    @property
    def errors(self) -> int:
        return self.api.errors

    @property
    def reason(self) -> str:
        return self.api.reason

    @property
    def available(self) -> bool:
        return self.api.available

    def health(self) -> dict[str, object]:
        """This user's entry in /health: status and failed calls."""
        return self.api.health()

    def lacks_node(self, node_name: str, why: str) -> bool:
        """True when `node_name` is '' (NODE_NAME not set): then there is no API for this user,
        and `why` says so (once)."""
        if node_name:
            return False
        if self.api.available:
            self.api.unavailable(why)
        return True

    def connect_or_end(self, loop: BackoffLoop) -> Connection | None:
        """`api.connect()`; None after saying why, with `loop` stopped when there is no API to
        reach at all (retrying cannot help)."""
        conn = self.api.connect()
        if conn is None and not self.api.available:
            loop.stop()
        return conn
