"""A TLS-terminating TCP proxy for tests: clients speak TLS to it (mutual TLS when it is given a CA for client
certificates), it forwards the bytes in the clear to a plaintext broker. Tansu 0.6.0 has no TLS listener of its own
(docs/broker.md, "TLS and SASL"), so the TLS tests put this in front of it and make Tansu advertise the proxy's
address. asyncio + ssl in a background thread, nothing to install. (A client whose handshake it refuses sees the
connection closed: asyncio logs the server side's reason only in debug mode.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from pathlib import Path
from typing import Self

log = logging.getLogger(__name__)


def server_context(certfile: Path, keyfile: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """The proxy's TLS context: its certificate; with ``client_ca``, clients must show a certificate it signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ThreadedProxy:
    """A TCP server on ``host`` (a free port unless ``port``) run by an event loop in a background thread, in front
    of ``upstream``; subclasses say how it listens (:meth:`_listen`). Usage: ``with Proxy(...) as proxy: ...
    proxy.address ...``."""

    kind = "proxy"

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> Self:
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-proxy-{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise RuntimeError(f"the {self.kind} proxy did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to start()
            self._error = error
            self._ready.set()
        finally:
            loop.close()

    async def _listen(self) -> asyncio.Server:
        raise NotImplementedError

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        server = await self._listen()
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()


class TlsProxy(ThreadedProxy):
    """Listens with TLS on ``host`` (a free port unless ``port``), forwards each connection to ``upstream``.

    Usage: ``with TlsProxy(context, ("127.0.0.1", 9092)) as proxy: ... proxy.address ...``."""

    kind = "TLS"

    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        super().__init__(upstream, host, port)
        self.context = context
        self.connections = 0

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._forward, self.host, self.port, ssl=self.context,
                                          ssl_handshake_timeout=10)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError as error:
            log.warning("TLS proxy: upstream %s:%s: %s", *self.upstream, error)
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until either side ends, then close ``sink`` (both proxies relay with it)."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):  # ssl.SSLError and ConnectionError are OSErrors
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.close()
