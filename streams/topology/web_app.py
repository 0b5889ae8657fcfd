"""An aiohttp application served on an address: what the OTLP receiver, ``combee serve`` and ``combee ui`` share,
the who-and-where guard in front of each (``combee_core.serve.doors``: a foreign ``Host`` 421, a foreign ``Origin``
403, security headers on every answer) and TLS (``COMBEE_HTTP_TLS_CERT`` / ``COMBEE_HTTP_TLS_KEY``)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from combee_core.serve.doors import DoorConfigError, DoorPolicy
from combee_core.settings import CombeeSettings


async def start_app(app: web.Application, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                    **runner_options: Any) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (port 0: a free one); the runner (``cleanup()`` stops it) and the bound port."""
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def http_url(host: str, port: int, path: str = "", *, tls: bool = False) -> str:
    """``http://host:port/path`` (``https`` with TLS), an IPv6 host in brackets."""
    return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}{path}"


def tls_context(settings: CombeeSettings) -> ssl.SSLContext | None:
    """The server TLS context of ``COMBEE_HTTP_TLS_CERT`` and ``COMBEE_HTTP_TLS_KEY`` (None: plain HTTP)."""
    if not settings.http_tls_cert or not settings.http_tls_key:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.http_tls_cert, settings.http_tls_key)
    except (OSError, ssl.SSLError) as error:
        raise DoorConfigError(f"COMBEE_HTTP_TLS_CERT / COMBEE_HTTP_TLS_KEY: cannot load {settings.http_tls_cert} "
                              f"with {settings.http_tls_key}: {getattr(error, 'strerror', None) or error}") from error
    return context


def door_policy(settings: CombeeSettings, bind_host: str, door: str) -> DoorPolicy:
    """The Host/Origin policy of a door bound to ``bind_host`` (``COMBEE_ALLOWED_HOSTS`` added)."""
    return DoorPolicy.for_bind(bind_host, settings.allowed_hosts, door=door)


def guard(app: web.Application, policy: DoorPolicy, headers: Mapping[str, str], *, tls: bool = False) -> None:
    """Put the who-and-where check first on ``app`` and ``headers`` on every answer it gives (errors included)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = policy.refusal(request.headers.get("Host"), request.headers.get("Origin"), tls=tls)
        if refused is not None:
            status, reason = refused
            return web.json_response({"error": reason}, status=status)
        return await handler(request)

    async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in headers.items():
            response.headers.setdefault(name, value)

    app.middlewares.insert(0, check)
    app.on_response_prepare.append(add_headers)
