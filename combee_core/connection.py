"""How every Kafka client reaches its cluster: the security protocol, TLS and SASL, kept apart from the pipeline's
settings. Each field is set from ``COMBEE_KAFKA_<FIELD_UPPER>`` (e.g. ``COMBEE_KAFKA_SECURITY_PROTOCOL``,
``COMBEE_KAFKA_SASL_PASSWORD``) or a ``--kafka-<field>`` flag; secrets come from the environment or from files,
never from flags, and print as ``**********`` (pydantic ``SecretStr``). ``streams/broker/connection.py`` turns this
into aiokafka's keyword arguments, in one place, for every client."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from combee_core.errors import CombeeError
from combee_core.partitions.fetch_wait import TANSU_IDLE_FETCH_WAIT_MS

CONNECTION_ENV_PREFIX = "COMBEE_KAFKA_"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

SECRET_FIELDS = ("ssl_key_password", "sasl_password", "sasl_oauth_token")
"""Fields that hold a secret: set from the environment only (no flag), never printed."""


class ConnectionSecretError(CombeeError, ValueError):
    """A secret named by the connection settings cannot be read (a missing file, a failing token command)."""


def env_name(field: str) -> str:
    """``ssl_cafile`` -> ``COMBEE_KAFKA_SSL_CAFILE``."""
    return CONNECTION_ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    """``ssl_cafile`` -> ``--kafka-ssl-cafile``."""
    return "--kafka-" + field.replace("_", "-")


class KafkaConnection(BaseModel):
    """Security settings of the connection to a Kafka cluster (PLAINTEXT by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)."
    )
    ssl_cafile: str | None = Field(
        default=None, description="PEM file of the CA(s) that signed the broker's certificate; none -> the system's "
        "trust store (enough for most managed clusters)."
    )
    ssl_certfile: str | None = Field(default=None, description="Client certificate (PEM) for mutual TLS.")
    ssl_keyfile: str | None = Field(default=None, description="Client private key (PEM) for mutual TLS.")
    ssl_key_password: SecretStr | None = Field(default=None, description="Password of an encrypted client key.")
    ssl_check_hostname: bool = Field(
        default=True, description="Check that the broker's certificate names the host connected to (turn off only "
        "for a test cluster whose certificate names another host)."
    )
    sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (with a SASL protocol)."
    )
    sasl_username: str | None = Field(default=None, description="User name for PLAIN and SCRAM.")
    sasl_password: SecretStr | None = Field(default=None, description="Password for PLAIN and SCRAM.")
    sasl_password_file: str | None = Field(
        default=None, description="File holding the password (a mounted secret; read at connect, trailing newline "
        "dropped) instead of sasl_password."
    )
    sasl_oauth_token: SecretStr | None = Field(default=None, description="OAUTHBEARER: a static access token.")
    sasl_oauth_token_file: str | None = Field(
        default=None, description="OAUTHBEARER: file holding the token, read again at every connect (a rotated "
        "token is picked up)."
    )
    sasl_oauth_token_command: str | None = Field(
        default=None, description="OAUTHBEARER: command that prints a token on stdout, run at every connect (e.g. a "
        "cloud CLI's token command)."
    )

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_username", "sasl_password_file",
                     "sasl_oauth_token_file", "sasl_oauth_token_command", *SECRET_FIELDS, mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return value or None

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else (value or None)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        problems = []
        tls_set = [name for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password")
                   if getattr(self, name) is not None]
        sasl_set = [name for name in ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_password_file",
                                      "sasl_oauth_token", "sasl_oauth_token_file", "sasl_oauth_token_command")
                    if getattr(self, name) is not None]
        protocol = env_name("security_protocol")
        if tls_set and not self.tls:
            problems.append(f"{', '.join(env_name(n) for n in tls_set)} need(s) {protocol}=SSL or SASL_SSL "
                            f"(it is {self.security_protocol})")
        if sasl_set and not self.sasl:
            problems.append(f"{', '.join(env_name(n) for n in sasl_set)} need(s) {protocol}=SASL_PLAINTEXT or "
                            f"SASL_SSL (it is {self.security_protocol})")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            problems.append(f"{env_name('ssl_keyfile')} needs {env_name('ssl_certfile')} (mutual TLS)")
        if self.ssl_key_password is not None and self.ssl_certfile is None:
            problems.append(f"{env_name('ssl_key_password')} needs {env_name('ssl_certfile')}")
        if self.sasl:
            problems.extend(self._sasl_problems())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _sasl_problems(self) -> list[str]:
        if self.sasl_mechanism is None:
            return [f"{self.security_protocol} needs {env_name('sasl_mechanism')} (PLAIN, SCRAM-SHA-256, "
                    f"SCRAM-SHA-512 or OAUTHBEARER)"]
        passwords = [n for n in ("sasl_password", "sasl_password_file") if getattr(self, n) is not None]
        tokens = [n for n in ("sasl_oauth_token", "sasl_oauth_token_file", "sasl_oauth_token_command")
                  if getattr(self, n) is not None]
        if self.sasl_mechanism == "OAUTHBEARER":
            problems = [f"OAUTHBEARER takes a token, not {env_name(n)}" for n in
                        (["sasl_username"] if self.sasl_username else []) + passwords]
            if len(tokens) != 1:
                problems.append(f"OAUTHBEARER needs exactly one of {env_name('sasl_oauth_token')}, "
                                f"{env_name('sasl_oauth_token_file')} or {env_name('sasl_oauth_token_command')}"
                                + (f" (given: {', '.join(env_name(n) for n in tokens)})" if tokens else ""))
            return problems
        problems = [f"{self.sasl_mechanism} takes a user name and password, not {env_name(n)}" for n in tokens]
        if self.sasl_username is None:
            problems.append(f"{self.sasl_mechanism} needs {env_name('sasl_username')}")
        if len(passwords) != 1:
            problems.append(f"{self.sasl_mechanism} needs exactly one of {env_name('sasl_password')} or "
                            f"{env_name('sasl_password_file')}")
        return problems

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> dict[str, str]:
        """The raw ``COMBEE_KAFKA_*`` values of ``env`` for this model's fields (validated by the caller)."""
        return {name: env[env_name(name)] for name in cls.model_fields if env_name(name) in env}

    def password(self) -> str:
        """The SASL password: ``sasl_password``, or the content of ``sasl_password_file``."""
        if self.sasl_password is not None:
            return self.sasl_password.get_secret_value()
        if self.sasl_password_file is None:
            raise ConnectionSecretError(f"no SASL password: set {env_name('sasl_password')} or "
                                        f"{env_name('sasl_password_file')}")
        return read_secret_file(self.sasl_password_file, "sasl_password_file")

    def describe(self) -> str:
        """One line for logs and messages: the protocol and what it uses, never a secret."""
        parts = []
        if self.tls:
            parts.append(f"CA {self.ssl_cafile or 'system trust store'}")
            if self.ssl_certfile:
                parts.append(f"client certificate {self.ssl_certfile}")
            if not self.ssl_check_hostname:
                parts.append("host name not checked")
        if self.sasl:
            parts.append(f"{self.sasl_mechanism}" + (f" as {self.sasl_username}" if self.sasl_username else ""))
        return self.security_protocol + (f" ({'; '.join(parts)})" if parts else "")


class UnusedSecuritySettings(CombeeError, ValueError):
    """Security settings were given for a connection that would not use them (one line: which, and what to do)."""


def given_settings(connection: KafkaConnection) -> list[str]:
    """The ``COMBEE_KAFKA_*`` names of the security settings ``connection`` sets (none: plain defaults)."""
    defaults = KafkaConnection()
    return [env_name(name) for name in KafkaConnection.model_fields
            if getattr(connection, name) != getattr(defaults, name)]


def refuse_unused(connection: KafkaConnection, broker: str) -> None:
    """:class:`UnusedSecuritySettings` when ``connection`` sets anything while the broker used is ``broker``, one
    that takes none of it (a local ``combee broker``, a throwaway embedded one: plaintext on loopback). A
    SASL_SSL configuration is never dropped silently for a plaintext connection (as the Java client warns of
    settings it was given and did not use, but refused: the user meant another broker)."""
    given = given_settings(connection)
    if given:
        raise UnusedSecuritySettings(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} set but no bootstrap is, and {broker} is "
            "plaintext and would not use them: set COMBEE_KAFKA_BOOTSTRAP (or --bootstrap) to the broker they are "
            "for, or unset them to use this one")


class BrokerSettings(BaseModel):
    """Where the broker is and how every client reaches it: the connection part of
    :class:`combee_core.settings.CombeeSettings` (which extends it with the pipeline's settings), each field set from
    ``COMBEE_<FIELD_UPPER>`` (``kafka``: from ``COMBEE_KAFKA_*``)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; none -> the broker `combee broker` recorded, if it runs."
    )
    kafka: KafkaConnection = Field(
        default_factory=KafkaConnection, description="Security of the connection to the broker named by "
        "kafka_bootstrap (TLS, SASL; combee_core/connection.py): COMBEE_KAFKA_* variables, --kafka-* flags."
    )
    broker_kind: Literal["auto", "kafka", "tansu"] = Field(
        default="auto", description="Which broker profile to use; auto -> tansu when embedded, kafka otherwise."
    )
    tansu_idle_fetch_wait_ms: int = Field(
        default=TANSU_IDLE_FETCH_WAIT_MS, ge=1, le=10_000, description="On Tansu, how long a consumer whose fetches "
        "have come back empty for a second lets the broker hold a fetch (it returns to 50 ms at the first record): "
        "less CPU while idle; the first record after a quiet spell waits up to this at each hop (docs/broker.md)."
    )
    broker_connect_timeout_s: float = Field(
        default=5.0, gt=0, le=600, description="How long a command waits for the broker to answer when it starts; "
        "then it exits with status 2."
    )
    broker_loss_grace_s: float = Field(
        default=60.0, gt=0, description="How long a running worker (or `combee tail`) keeps going without an answer "
        "from its broker; then it stops and exits with status 3."
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _blank_bootstrap_is_none(cls, value: str | None) -> str | None:
        return value or None


def describe_connection_problem(loc: list[str], message: str) -> str | None:
    """A validation problem of the ``kafka`` field, naming the variable and the flag that set it; None for another
    field's."""
    if loc[:1] != ["kafka"]:
        return None
    if len(loc) == 1:
        return f"Kafka connection: {message}"
    return f"{env_name(loc[1])} (or {flag_name(loc[1])}): {message}"


def read_secret_file(path: str, field: str) -> str:
    """A secret file's content without its trailing newline; :class:`ConnectionSecretError` naming the setting."""
    try:
        return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as error:
        raise ConnectionSecretError(f"cannot read {env_name(field)}={path}: {error.strerror or error}") from error


PLAINTEXT = KafkaConnection()
"""The connection to a broker this machine runs (embedded Tansu, ``combee broker``): plaintext on loopback."""
