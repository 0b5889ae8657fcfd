"""A SASL-terminating TCP proxy for tests: clients log in to it with SCRAM (RFC 5802/7677, Kafka's SaslHandshake v1
and SaslAuthenticate v0/v1), it forwards the rest in the clear to a plaintext broker. Tansu 0.6.0 authenticates
(``--authentication``) but cannot be given a user (docs/broker.md, "TLS and SASL"), so the successful-login test
puts this in front of Tansu and makes Tansu advertise the proxy's address. Before a login succeeds it forwards only
ApiVersions; anything else, a wrong password or an unknown user closes the connection after the error answer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import secrets
import struct

from streams.testing.tls_proxy import ThreadedProxy, pipe

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 58, 33, 34
ITERATIONS = 4096
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramServer:
    """The server side of one SCRAM exchange for ``users`` (name -> password): :meth:`first` answers the client's first
    message, :meth:`final` checks its proof (None when refused) and gives the server's signature."""

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self.digest = HASHES[mechanism]
        self.users = users
        self.salt = secrets.token_bytes(16)
        self.nonce = ""
        self.user = ""
        self.first_bare = self.server_first = ""

    def _hmac(self, key: bytes, text: bytes) -> bytes:
        return hmac.new(key, text, self.digest).digest()

    def first(self, message: str) -> str:
        gs2, _, bare = message.partition(",,")  # "n,," (no channel binding) then "n=user,r=nonce"
        fields = dict(part.split("=", 1) for part in bare.split(","))
        self.user, self.first_bare = fields["n"], bare
        self.nonce = fields["r"] + secrets.token_urlsafe(18)
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={ITERATIONS}"
        return self.server_first

    def final(self, message: str) -> str | None:
        without_proof, _, proof = message.rpartition(",p=")
        fields = dict(part.split("=", 1) for part in without_proof.split(","))
        password = self.users.get(self.user)
        if password is None or fields.get("r") != self.nonce:
            return None
        salted = hashlib.pbkdf2_hmac(self.digest, password.encode(), self.salt, ITERATIONS)
        client_key = self._hmac(salted, b"Client Key")
        auth = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        signature = self._hmac(hashlib.new(self.digest, client_key).digest(), auth)
        claimed = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=False))
        if not hmac.compare_digest(hashlib.new(self.digest, claimed).digest(),
                                   hashlib.new(self.digest, client_key).digest()):
            return None
        return "v=" + base64.b64encode(self._hmac(self._hmac(salted, b"Server Key"), auth)).decode()


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


class SaslProxy(ThreadedProxy):
    """Listens on ``host`` (a free port unless ``port``), logs clients in with ``mechanism`` against ``users``, then
    forwards each connection to ``upstream``. ``logins`` counts the successful ones, ``refusals`` the refused ones."""

    kind = "SASL"

    def __init__(self, upstream: tuple[str, int], users: dict[str, str], mechanism: str = "SCRAM-SHA-256",
                 host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(upstream, host, port)
        self.users, self.mechanism = users, mechanism
        self.logins = self.refusals = 0

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, self.host, self.port)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        try:
            if await self._login(reader, writer, up_reader, up_writer):
                await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
                return
        except (OSError, asyncio.IncompleteReadError, ValueError, KeyError, struct.error) as error:
            log.info("SASL proxy: connection dropped during login: %r", error)
        for stream in (writer, up_writer):
            with contextlib.suppress(OSError, RuntimeError):
                stream.close()

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        """Run the client's SASL exchange; True once it is logged in, False when refused."""
        scram: ScramServer | None = None
        while True:
            frame = await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
            key, version, correlation, client_len = struct.unpack(">hhih", frame[:10])
            body = frame[10 + max(client_len, 0):]
            head = struct.pack(">i", correlation)
            if key == API_VERSIONS:  # forwarded: the broker says which versions it speaks
                up_writer.write(struct.pack(">i", len(frame)) + frame)
                size = await up_reader.readexactly(4)
                writer.write(size + await up_reader.readexactly(struct.unpack(">i", size)[0]))
            elif key == SASL_HANDSHAKE:
                (length,) = struct.unpack(">h", body[:2])
                offered = body[2:2 + length].decode() == self.mechanism
                answer = struct.pack(">hi", 0 if offered else UNSUPPORTED_SASL_MECHANISM, 1) + _string(self.mechanism)
                writer.write(_frame(head + answer))
                if not offered:
                    return False
                scram = ScramServer(self.mechanism, self.users)
            elif key == SASL_AUTHENTICATE and scram is not None and version <= 1:
                (length,) = struct.unpack(">i", body[:4])
                message = body[4:4 + length].decode()
                reply = scram.first(message) if not scram.server_first else scram.final(message)
                error = None if reply is not None else f"SCRAM authentication of {scram.user!r} failed"
                answer = struct.pack(">h", 0 if reply is not None else SASL_AUTHENTICATION_FAILED) + _string(error)
                data = (reply or "").encode()
                answer += struct.pack(">i", len(data)) + data + (struct.pack(">q", 0) if version >= 1 else b"")
                writer.write(_frame(head + answer))
                if reply is None:
                    self.refusals += 1
                    await writer.drain()
                    return False
                if reply.startswith("v="):
                    self.logins += 1
                    await writer.drain()
                    return True
            else:
                log.info("SASL proxy: request %s v%s before a login: connection closed", key, version)
                return False
            await writer.drain()


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload
