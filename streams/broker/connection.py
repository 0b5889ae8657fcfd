"""The one place that turns :class:`~combee_core.connection.KafkaConnection` into aiokafka's keyword arguments: every
client the project builds (producers, consumers, admin clients, the probes) takes its ``bootstrap_servers``,
``security_protocol``, ``ssl_context`` and SASL arguments from :func:`client_kwargs`."""

from __future__ import annotations

import asyncio
import functools
import shlex
import ssl
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context

from combee_core.connection import ConnectionSecretError, KafkaConnection, env_name, read_secret_file
from combee_core.errors import CombeeError
from streams.broker.log_mask import mask_kafka_client_logs

TOKEN_COMMAND_TIMEOUT_S = 30.0


class ConnectionSettingsError(CombeeError, ValueError):
    """The connection settings name a certificate or key that cannot be loaded (the message says which)."""


def client_kwargs(bootstrap: str, connection: KafkaConnection) -> dict[str, Any]:
    """``bootstrap_servers`` and the security arguments of any aiokafka client (producer, consumer, admin, client).
    The client's loggers get their mask first: no password, token or record value in any of its log lines."""
    mask_kafka_client_logs()
    kwargs: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": connection.security_protocol}
    if connection.tls:
        kwargs["ssl_context"] = ssl_context(connection)
    if connection.sasl:
        kwargs["sasl_mechanism"] = connection.sasl_mechanism
        if connection.sasl_mechanism == "OAUTHBEARER":
            kwargs["sasl_oauth_token_provider"] = ConnectionTokenProvider(connection)
        else:
            kwargs["sasl_plain_username"] = connection.sasl_username
            kwargs["sasl_plain_password"] = connection.password()
    return kwargs


@functools.lru_cache(maxsize=16)
def ssl_context(connection: KafkaConnection) -> ssl.SSLContext:
    """A client TLS context: the CA file (else the system's trust store), the client certificate and key for mutual
    TLS, host name checking unless turned off. A file that cannot be loaded: one line naming the setting.

    Made once per connection settings and shared by every client (loading the system's trust store takes ~60 ms,
    and a worker builds dozens of clients; the watchdog probes every 2 s): certificate files are read when a process
    first connects, so a rotated certificate takes a restart (as for Kafka's own clients)."""
    try:
        context = create_ssl_context(cafile=connection.ssl_cafile)
    except (OSError, ssl.SSLError) as error:
        raise ConnectionSettingsError(f"cannot load the CA file {env_name('ssl_cafile')}={connection.ssl_cafile}: "
                                      f"{_reason(error)}") from error
    if connection.ssl_certfile is not None:
        password = connection.ssl_key_password.get_secret_value() if connection.ssl_key_password else None
        try:
            context.load_cert_chain(connection.ssl_certfile, connection.ssl_keyfile, password)
        except (OSError, ssl.SSLError) as error:
            raise ConnectionSettingsError(
                f"cannot load the client certificate {env_name('ssl_certfile')}={connection.ssl_certfile} with key "
                f"{env_name('ssl_keyfile')}={connection.ssl_keyfile or '(in the certificate file)'}: "
                f"{_reason(error)} (check {env_name('ssl_key_password')})") from error
    context.check_hostname = connection.ssl_check_hostname
    return context


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and (error.reason in ("PEM_LIB", "BAD_DECRYPT", "KEY_VALUES_MISMATCH")
                                            or "PEM lib" in str(error)):
        return "the key cannot be read with this password, is not a PEM key, or does not match the certificate"
    if isinstance(error, ssl.SSLError):
        return str(error.reason or error).lower().replace("_", " ")
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


class ConnectionTokenProvider(AbstractTokenProvider):
    """OAUTHBEARER tokens for aiokafka: the static token, the token file (read at every connect) or the token
    command's stdout (run at every connect)."""

    def __init__(self, connection: KafkaConnection) -> None:
        self._connection = connection

    async def token(self) -> str:
        connection = self._connection
        if connection.sasl_oauth_token is not None:
            return connection.sasl_oauth_token.get_secret_value()
        if connection.sasl_oauth_token_file is not None:
            return read_secret_file(connection.sasl_oauth_token_file, "sasl_oauth_token_file")
        assert connection.sasl_oauth_token_command is not None  # the model allows no other case
        return await run_token_command(connection.sasl_oauth_token_command)


async def run_token_command(command: str, timeout_s: float = TOKEN_COMMAND_TIMEOUT_S) -> str:
    """The first line of a token command's stdout; :class:`ConnectionSecretError` (never showing stdout) when it
    fails, prints nothing or does not finish within ``timeout_s``."""
    where = env_name("sasl_oauth_token_command")
    try:
        process = await asyncio.create_subprocess_exec(*shlex.split(command), stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE)
    except OSError as error:
        raise ConnectionSecretError(f"cannot run {where}: {error.strerror or error}") from error
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError as error:
        process.kill()
        raise ConnectionSecretError(f"{where} did not finish within {timeout_s:g} s") from error
    token = stdout.decode("utf-8", "replace").strip().splitlines()
    if process.returncode != 0 or not token:
        last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ConnectionSecretError(f"{where} exited with status {process.returncode} and no token ({last[0]})")
    return token[0].strip()
