"""What the basic-auth tests share: real bcrypt hashes, the Authorization header, an
AccessControl in front of podgpu's own listener on loopback, and a BasicAuthChecker on a fresh
event loop, closed after its scenario."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import bcrypt

from podgpu.http.app import App, Request, Response
from podgpu.http.auth import AccessControl, BasicAuthChecker, Policy
from tests.unit.http.loopback import Client, serving

T = TypeVar("T")
ROUTES = ("/metrics", "/health", "/", "/api/v1/snapshot")
"""What `serve_policy` serves behind the policy (the last one: "any later endpoint")."""


def bcrypt_hash(pw: bytes, cost: int = 4, prefix: str = "$2b$") -> str:
    """A real bcrypt hash of `pw` at `cost`, spelled with `prefix` ($2y$ is PHP's and Apache's)."""
    return prefix + bcrypt.hashpw(pw, bcrypt.gensalt(cost)).decode()[4:]


def basic(user: str | bytes, password: str | bytes) -> dict[str, str]:
    """The Authorization header of HTTP basic auth (RFC 7617) for `user` and `password`."""
    u = user.encode() if isinstance(user, str) else user
    p = password.encode() if isinstance(password, str) else password
    return {"Authorization": "Basic " + base64.b64encode(u + b":" + p).decode()}


def serve_policy(policy: Policy, scenario: Callable[[Client, AccessControl], Awaitable[None]],
                 checker: BasicAuthChecker | None = None) -> None:
    """Runs `scenario` against `ROUTES` (200 "secret metrics") behind `policy` on loopback."""

    async def main() -> None:
        app = App()

        def ok(_r: Request) -> Response:
            return Response.text(200, "secret metrics\n")

        for path in ROUTES:
            app.add_get(path, ok)
        access = AccessControl(policy, checker)
        access.install(app)
        async with serving(app) as (port, _guard):
            await scenario(Client(port), access)
        access.checker.close()

    asyncio.run(main())


def with_checker(scenario: Callable[[BasicAuthChecker], Awaitable[T]], **kwargs: Any) -> T:
    """`scenario` with a `BasicAuthChecker(**kwargs)` made on a fresh event loop and closed after;
    returns what the scenario returns."""

    async def main() -> T:
        checker = BasicAuthChecker(**kwargs)
        try:
            return await scenario(checker)
        finally:
            checker.close()

    return asyncio.run(main())
