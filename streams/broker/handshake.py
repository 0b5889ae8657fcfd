"""Does the broker answer, and accept this connection? (:func:`check_broker`, the first contact of every command.)
With a secured broker, in two steps so that a failure says which one failed: the TLS handshake
(a raw ApiVersions request over TLS), then the SASL authentication (an aiokafka connection). aiokafka itself only
logs why a connection failed and retries; here a handshake or authentication failure is one line at once
(:class:`BrokerHandshakeFailed`, :class:`BrokerAuthenticationFailed`, exit 2), while a broker that does not answer
yet is asked again until the deadline (then the caller's :class:`BrokerUnreachable`)."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time

from aiokafka.errors import KafkaError

from combee_core.connection import PLAINTEXT, KafkaConnection, env_name
from combee_core.errors import CombeeError
from streams.broker.errors import BrokerAuthenticationFailed, BrokerHandshakeFailed, BrokerUnreachable
from streams.broker.probe import api_versions, bootstrap_addresses, quiet_client_logs, ssl_context_of, wait_for_broker


async def check_broker(bootstrap: str, timeout_s: float = 5.0, *, connection: KafkaConnection = PLAINTEXT) -> None:
    """Return once ``bootstrap`` answers metadata through ``connection``: :class:`BrokerUnreachable` (one line)
    after ``timeout_s``; at once, a :class:`~streams.broker.errors.BrokerHandshakeFailed` or
    :class:`~streams.broker.errors.BrokerAuthenticationFailed` when the broker answers but the TLS handshake or the
    SASL authentication fails."""
    deadline = time.monotonic() + timeout_s
    try:
        with quiet_client_logs():
            if connection.security_protocol != "PLAINTEXT":
                await check_security(bootstrap, connection, deadline)
            await wait_for_broker(bootstrap, timeout_s=max(deadline - time.monotonic(), 0.1), connection=connection)
    except TimeoutError as error:
        cause = error.__cause__ or error
        hint = ("" if connection.security_protocol == "PLAINTEXT" else
                f"; it was asked with {connection.security_protocol}: does that listener speak it?")
        raise BrokerUnreachable(f"no Kafka broker answers at {bootstrap} (waited {timeout_s:g}s; is it running? "
                                f"is the address right?{hint})") from cause


_NOT_YET = (TimeoutError, OSError, asyncio.IncompleteReadError, struct.error, ValueError)
"""A broker that is not there (yet): ask again until the deadline."""


async def check_security(bootstrap: str, connection: KafkaConnection, deadline: float) -> None:
    """Return once some address of ``bootstrap`` completes the TLS handshake (when the protocol has TLS) and the SASL
    authentication (when it has SASL); raise at once when one of them fails; ``TimeoutError`` at ``deadline``."""
    context = ssl_context_of(connection)
    last: BaseException | None = None
    closed_after_tls = 0
    while time.monotonic() < deadline:
        for host, port in bootstrap_addresses(bootstrap):
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                if context is not None:
                    closed_after_tls = await _tls_step(host, port, connection, context, min(remaining, 5.0),
                                                       closed_after_tls)
                    if closed_after_tls:
                        continue
                if connection.sasl:
                    if context is None:  # the broker answers at all (else: not there yet)
                        await api_versions(host, port, min(remaining, 5.0))
                    await _sasl_step(host, port, connection, remaining)
                return
            except CombeeError:  # a secret that cannot be read: not a broker that is not there yet
                raise
            except _NOT_YET as error:
                last = error
        await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
    raise TimeoutError(f"no answer from {bootstrap}: {last!r}") from last


async def _tls_step(host: str, port: int, connection: KafkaConnection, context: ssl.SSLContext, timeout_s: float,
                    closed_before: int) -> int:
    """The TLS handshake and an ApiVersions answer over it; returns how many times in a row the broker has closed the
    connection right after the handshake (with TLS 1.3 that is how a refused client certificate shows: the
    client's handshake completes, then the broker hangs up). Twice in a row is taken as a refusal."""
    tls_done = False

    def handshake_done(transport: object) -> None:
        nonlocal tls_done
        tls_done = True

    try:
        await api_versions(host, port, timeout_s, context, on_connected=handshake_done)
        return 0
    except ssl.SSLCertVerificationError as error:
        raise BrokerHandshakeFailed(_untrusted(host, port, connection, error)) from error
    except ssl.SSLError as error:
        raise BrokerHandshakeFailed(_refused(host, port, connection, error)) from error
    except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as error:
        if not tls_done:
            raise
        if closed_before + 1 < 2:
            return closed_before + 1
        have = connection.ssl_certfile or "none"
        raise BrokerHandshakeFailed(
            f"TLS handshake with {host}:{port} failed: the broker closed the connection right after it, twice "
            f"(a broker that wants a client certificate does this to one it lacks or refuses); check "
            f"{env_name('ssl_certfile')} and {env_name('ssl_keyfile')} (now {have})") from error


def _untrusted(host: str, port: int, connection: KafkaConnection, error: ssl.SSLCertVerificationError) -> str:
    what = error.verify_message or error.reason or "not trusted"
    start = f"TLS handshake with {host}:{port} failed: the broker's certificate is not accepted ({what})"
    if "hostname" in str(what).lower() or "ip address mismatch" in str(what).lower():
        return (f"{start}; connect by a name the certificate holds, or set {env_name('ssl_check_hostname')}=false "
                f"for a test cluster only")
    ca = connection.ssl_cafile or "the system trust store"
    return (f"{start}; check {env_name('ssl_cafile')} (now {ca}): it must hold the CA that signed the broker's "
            f"certificate")


def _refused(host: str, port: int, connection: KafkaConnection, error: ssl.SSLError) -> str:
    reason = str(error.reason or error)
    start = f"TLS handshake with {host}:{port} failed ({reason.lower().replace('_', ' ')})"
    if "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason:
        return (f"{start}: the broker wants a client certificate it accepts; check {env_name('ssl_certfile')} and "
                f"{env_name('ssl_keyfile')} (now {connection.ssl_certfile or 'none'})")
    if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "CERTIFICATE_UNKNOWN" in reason:
        return (f"{start}: the broker does not accept the client certificate {connection.ssl_certfile}; check "
                f"{env_name('ssl_certfile')} was signed by a CA the broker trusts")
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        return f"{start}: that listener does not speak TLS; check the port and {env_name('security_protocol')}"
    return f"{start}; check {env_name('ssl_cafile')}, {env_name('ssl_certfile')} and the broker's TLS listener"


async def _sasl_step(host: str, port: int, connection: KafkaConnection, timeout_s: float) -> None:
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaConnectionError, UnsupportedSaslMechanismError

    from streams.broker.connection import client_kwargs

    kwargs = client_kwargs(f"{host}:{port}", connection)
    del kwargs["bootstrap_servers"]
    who = f"{connection.sasl_mechanism}" + (f" as {connection.sasl_username}" if connection.sasl_username else "")
    try:
        conn = await asyncio.wait_for(create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **kwargs),
                                      timeout_s)
    except UnsupportedSaslMechanismError as error:
        raise BrokerAuthenticationFailed(
            f"SASL authentication ({who}) at {host}:{port} failed: the broker does not offer "
            f"{connection.sasl_mechanism}"
            f"; check {env_name('sasl_mechanism')} against the cluster's mechanisms") from error
    except (KafkaConnectionError, *_NOT_YET) as error:  # it answered ApiVersions just now: closed on the SASL steps
        raise BrokerAuthenticationFailed(_auth_hint(
            host, port, connection, who, f"the broker closed the connection during the SASL exchange: it may not "
            f"offer {connection.sasl_mechanism}, or refused the credentials")) from error
    except KeyError as error:  # aiokafka's SCRAM reads a server-final message without a proof ("v") this way
        raise BrokerAuthenticationFailed(_auth_hint(host, port, connection, who, "the broker refused the "
                                                    "credentials")) from error
    except (KafkaError, AssertionError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BrokerAuthenticationFailed(_auth_hint(host, port, connection, who, reason)) from error
    conn.close()


def _auth_hint(host: str, port: int, connection: KafkaConnection, who: str, reason: str) -> str:
    start = f"SASL authentication ({who}) at {host}:{port} failed ({reason})"
    if connection.sasl_mechanism == "OAUTHBEARER":
        return f"{start}; check the token ({env_name('sasl_oauth_token')}, _FILE or _COMMAND) is valid for this cluster"
    return (f"{start}; check {env_name('sasl_username')} and the password ({env_name('sasl_password')} or "
            f"{env_name('sasl_password_file')}), and that the user exists for {connection.sasl_mechanism}")
