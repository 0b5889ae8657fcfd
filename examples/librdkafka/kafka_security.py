"""librdkafka's security settings from the same ``COMBEE_KAFKA_*`` variables ``combee`` reads (docs/broker.md, "TLS
and SASL"); none set: plaintext. Secrets come from the environment or files, never from the command line.

- ``COMBEE_KAFKA_SECURITY_PROTOCOL``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
- ``COMBEE_KAFKA_SSL_CAFILE`` (else the system's trust store), ``COMBEE_KAFKA_SSL_CERTFILE`` / ``_KEYFILE`` /
  ``_KEY_PASSWORD`` (mutual TLS), ``COMBEE_KAFKA_SSL_CHECK_HOSTNAME=false`` to skip the host name check;
- ``COMBEE_KAFKA_SASL_MECHANISM`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), ``COMBEE_KAFKA_SASL_USERNAME``,
  ``COMBEE_KAFKA_SASL_PASSWORD`` or ``_PASSWORD_FILE``; OAUTHBEARER: ``COMBEE_KAFKA_SASL_OAUTH_TOKEN``, ``_TOKEN_FILE``
  or ``_TOKEN_COMMAND`` (read or run each time librdkafka asks for a token).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TOKEN_LIFETIME_S = 300  # librdkafka asks again before this; the token's own expiry is the broker's business


def _secret(env: Mapping[str, str], name: str) -> str | None:
    if env.get(name):
        return env[name]
    path = env.get(f"{name}_FILE")
    return Path(path).read_text(encoding="utf-8").rstrip("\r\n") if path else None


def security_config(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The librdkafka (confluent-kafka) configuration entries for the connection the variables describe."""
    env = os.environ if env is None else env
    protocol = env.get("COMBEE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").upper() or "PLAINTEXT"
    if protocol not in PROTOCOLS:
        raise ValueError(f"COMBEE_KAFKA_SECURITY_PROTOCOL={protocol}: use one of {', '.join(PROTOCOLS)}")
    config: dict[str, Any] = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        for variable, key in (("COMBEE_KAFKA_SSL_CAFILE", "ssl.ca.location"),
                              ("COMBEE_KAFKA_SSL_CERTFILE", "ssl.certificate.location"),
                              ("COMBEE_KAFKA_SSL_KEYFILE", "ssl.key.location"),
                              ("COMBEE_KAFKA_SSL_KEY_PASSWORD", "ssl.key.password")):
            if env.get(variable):
                config[key] = env[variable]
        check = env.get("COMBEE_KAFKA_SSL_CHECK_HOSTNAME", "true").lower() not in ("false", "0", "no")
        config["ssl.endpoint.identification.algorithm"] = "https" if check else "none"
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = env.get("COMBEE_KAFKA_SASL_MECHANISM", "").upper()
        config["sasl.mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            config["oauth_cb"] = lambda _config: (_token(env), time.time() + TOKEN_LIFETIME_S)
        elif mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            config["sasl.username"] = env.get("COMBEE_KAFKA_SASL_USERNAME", "")
            config["sasl.password"] = _secret(env, "COMBEE_KAFKA_SASL_PASSWORD") or ""
        else:
            raise ValueError(f"{protocol} needs COMBEE_KAFKA_SASL_MECHANISM: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or "
                             "OAUTHBEARER")
    return config


def _token(env: Mapping[str, str]) -> str:
    token = _secret(env, "COMBEE_KAFKA_SASL_OAUTH_TOKEN")
    if token:
        return token
    command = env.get("COMBEE_KAFKA_SASL_OAUTH_TOKEN_COMMAND", "")
    return subprocess.run(shlex.split(command), capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip().splitlines()[0]
