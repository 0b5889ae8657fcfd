"""An aiohttp application served on an address: what the OTLP receiver, ``combee serve`` and ``combee ui`` share."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def start_app(app: web.Application, host: str, port: int, **runner_options: Any) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (port 0: a free one); the runner (``cleanup()`` stops it) and the bound port."""
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def http_url(host: str, port: int, path: str = "") -> str:
    """``http://host:port/path``, an IPv6 host in brackets."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"
