"""The web config at run time: load at start (bad file = exit 2), then follow the file.

exporter-toolkit re-reads the file on every request and handshake; podgpu checks the file and every
file it names (certificate, key, client CA) once a second and on SIGHUP, by content (podgpu.follow,
on the event loop, without `settle`: a change is reloaded at the first poll that sees it), so a
Kubernetes Secret update (a symlink swap) or an in-place rewrite rotates the certificate within
about a second without a restart. A reload is all or nothing: if the new file or any certificate
in it is bad, the last good config keeps serving, the log says why once per change, and /health's
`web_config` entry shows the error until a good version is loaded. TLS cannot be switched on or
off by a reload (the socket would have to be re-opened): that edit is refused the same way.

An edit that removes authentication (all of `basic_auth_users`, client-certificate verification,
or `client_allowed_sans`) is refused too, with a WARNING, and needs a restart:
failing closed means a template or Secret mistake that drops a key keeps the endpoint protected
and shows in /health, while an operator who means it restarts the DaemonSet, which also makes
the change visible in its rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from podgpu.follow import DEFAULT_POLL_SECONDS, Follower, poll_on_loop
from podgpu.http.app import App
from podgpu.http.auth import AccessControl, BasicAuthChecker, Policy, RateLimiter
from podgpu.http.tls import TlsReloader
from podgpu.http.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)


class WebSecurity:
    """TLS contexts, access rules and their reloading for one `--web-config-file`."""

    def __init__(self, path: str, *, poll_seconds: float = DEFAULT_POLL_SECONDS,
                 checker: BasicAuthChecker | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """Raises WebConfigError (exit 2) when the file or a certificate it names is bad."""
        self.path = path
        self._poll = poll_seconds
        self._clock = clock
        cfg = load_web_config(path)
        self.tls = TlsReloader(cfg.tls, path) if cfg.tls else None
        self.access = AccessControl(_policy(cfg, None), checker)
        self.config = cfg
        self.generation = 1
        self.loaded_at = clock()
        self.last_error: str | None = None
        self.last_error_public: str | None = None  # without user names, for /health
        self.failed_reloads = 0
        self._follower = Follower(cfg.files)
        self._kick = asyncio.Event()
        self._force = False
        self._task: asyncio.Task[None] | None = None
        for w in cfg.warnings:
            log.warning("%s", w)
        if cfg.tls is None and not cfg.users:
            log.warning("%s: no tls_server_config and no basic_auth_users: serving plain HTTP "
                        "without authentication", path)
        log.info("web config %s: %s", path, describe(cfg))

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to listen with (None: plain HTTP); it stays the same across reloads."""
        return self.tls.front if self.tls else None

    def install(self, app: App) -> None:
        """Guard every route of `app` and follow the file while the app runs."""
        self.access.install(app)
        app.on_startup.append(self._start_watching)
        app.on_cleanup.append(self._stop_watching)

    def request_reload(self) -> None:
        """Reload now even if nothing seems changed (SIGHUP). Call on the event loop thread."""
        self._force = True
        self._kick.set()

    def check(self) -> bool:
        """Reload if a watched file changed (or a reload was requested); True if reloaded."""
        force, self._force = self._force, False
        if self._follower.poll() is None and not force:
            return False
        return self.reload()

    def reload(self) -> bool:
        """Apply the file as it is now, whole, or keep the last good config and say so in one
        log line and in /health."""
        level = logging.ERROR
        try:
            cfg = load_web_config(self.path)
            self._follower.watch(cfg.files)  # a file named only by the new version too
            if (cfg.tls is None) != (self.tls is None):
                raise WebConfigError(f"{self.path}: turning TLS {'on' if cfg.tls else 'off'} "
                                     "needs a restart")
            removed = removed_protection(self.config, cfg)
            if removed:
                level = logging.WARNING
                raise WebConfigError(f"{self.path}: this edit {removed}; removing "
                                     "authentication needs a restart")
            if self.tls is not None and cfg.tls is not None:
                self.tls.replace(cfg.tls, self.path)
        except Exception as exc:
            message = str(exc) if isinstance(exc, WebConfigError) else (
                f"{self.path}: {type(exc).__name__} while reading it (a podgpu bug): {exc}")
            self.last_error = message
            self.last_error_public = (exc.public if isinstance(exc, WebConfigError)
                                      else f"{self.path}: {type(exc).__name__}")
            self.failed_reloads += 1
            log.log(level, "web config reload failed; still serving generation %d loaded at %s: "
                    "%s", self.generation, _iso(self.loaded_at), " ".join(message.split()))
            return False
        self.access.policy = _policy(cfg, self.access.policy)
        self.config = cfg
        self.generation += 1
        self.loaded_at = self._clock()
        self.last_error = self.last_error_public = None
        for w in cfg.warnings:
            log.warning("%s", w)
        log.info("web config %s reloaded (generation %d): %s", self.path, self.generation,
                 describe(cfg))
        return True

    def health(self) -> dict[str, Any]:
        """/health's `web_config` entry. A failed reload is reported, never a 503: the last good
        config still protects the endpoint, and a restart would refuse the bad file."""
        cfg = self.config
        body: dict[str, Any] = {
            "status": "reload failed" if self.last_error else "ok",
            "file": self.path,
            "generation": self.generation,
            "loaded_at": _iso(self.loaded_at),
            "tls": cfg.tls is not None,
            "client_auth_type": cfg.tls.client_auth_type if cfg.tls else None,
            "basic_auth": bool(cfg.users),
            "failed_reloads": self.failed_reloads,
            **self.access.counters(),
        }
        if self.last_error:
            body["error"] = self.last_error_public
        return body

    async def _start_watching(self, _app: App) -> None:
        self._task = asyncio.create_task(
            poll_on_loop(self.check, self._poll, self._kick, what=f"the web config {self.path}"),
            name="podgpu-web-config")

    async def _stop_watching(self, _app: App) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.access.checker.close()


def removed_protection(old: WebConfig, new: WebConfig) -> str:
    """What `new` drops of `old`'s authentication, as words for the log; "" when nothing."""
    gone = []
    if old.users and not new.users:
        gone.append("removes basic_auth_users")
    if old.tls is not None and new.tls is not None:
        if old.tls.client_auth_type != new.tls.client_auth_type and old.tls.verifies_clients \
                and (new.tls.client_auth_type != "RequireAndVerifyClientCert"):
            gone.append(f"changes client_auth_type from {old.tls.client_auth_type} to "
                        f"{new.tls.client_auth_type}")
        if old.tls.client_allowed_sans and not new.tls.client_allowed_sans:
            gone.append("removes client_allowed_sans")
    return " and ".join(gone)


def describe(cfg: WebConfig) -> str:
    """One line for the log: what is on, never a secret."""
    parts = []
    if cfg.tls:
        t = cfg.tls
        parts.append(f"TLS {t.min_version}-{t.max_version}, client certificates "
                     f"{t.client_auth_type}" + (f" (SANs {len(t.client_allowed_sans)})"
                                                if t.client_allowed_sans else ""))
    else:
        parts.append("plain HTTP")
    parts.append(f"basic auth for {len(cfg.users)} user(s)" if cfg.users else "no basic auth")
    if cfg.headers:
        parts.append("headers " + ", ".join(n for n, _ in cfg.headers))
    if cfg.rate_limit_interval > 0:
        parts.append(f"rate limit 1 per {cfg.rate_limit_interval:g} s, burst "
                     f"{cfg.rate_limit_burst}")
    return "; ".join(parts)


def _policy(cfg: WebConfig, old: Policy | None) -> Policy:
    rate = None
    if cfg.rate_limit_interval > 0:
        same = (old is not None and old.rate is not None
                and (old.rate.interval, old.rate.burst) == (cfg.rate_limit_interval,
                                                            cfg.rate_limit_burst))
        rate = old.rate if same and old is not None else RateLimiter(cfg.rate_limit_interval,
                                                                     cfg.rate_limit_burst)
    return Policy(users=dict(cfg.users), headers=cfg.headers,
                  allowed_sans=cfg.tls.client_allowed_sans if cfg.tls else (), rate=rate)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
