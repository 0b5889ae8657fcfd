"""The settings of ``combee serve`` and of every HTTP door's who-and-where checks (part of
:class:`combee_core.settings.CombeeSettings`, set from ``COMBEE_*`` like every setting)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

DEFAULT_MCP_PORT = 8766
"""`combee serve --mcp http`'s port when none is set (beside the HTTP API's 8765 and `combee ui`'s 8767)."""


class ServeSettings(BaseModel):
    """``combee serve``'s fields of :class:`~combee_core.settings.CombeeSettings`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    serve_host: str = Field(default="127.0.0.1", description="Address `combee serve` binds (HTTP and MCP over "
                            "HTTP); beyond loopback it needs serve_token.")
    serve_port: int = Field(default=8765, ge=0, le=65535, description="`combee serve` HTTP port (0: any free one).")
    serve_mcp_port: int = Field(default=DEFAULT_MCP_PORT, ge=0, le=65535, description="`combee serve --mcp http` MCP "
                                "streamable-HTTP port (0: any free one; `--mcp stdio` serves MCP on stdin/stdout).")
    serve_token: SecretStr | None = Field(default=None, description="Bearer token `combee serve` requires on every "
                                          "request (required when it binds beyond loopback).")
    allowed_hosts: str = Field(default="", description="Host names every HTTP door (ui, serve, MCP, otlp-receiver, "
                               "/metrics) answers besides loopback names, IP addresses and the address it binds, "
                               "comma-separated (a reverse proxy's name); another Host is refused 421.")
    access_keys: str = Field(default="", description="Access keys scoped to playbooks, one 'NAME sha256:HEX "
                             "read=a,b write=a' line each (newline or ;): what serve and MCP let a key read and the "
                             "otlp-receiver let it write (docs/serving.md, 'Keys').")
    access_keys_file: str | None = Field(default=None, description="A file of access key lines, as access_keys.")
    http_tls_cert: str | None = Field(default=None, description="PEM certificate (chain) the HTTP doors serve TLS "
                                      "with (with http_tls_key; none: plain HTTP).")
    http_tls_key: str | None = Field(default=None, validate_default=True,
                                     description="PEM private key of http_tls_cert.")
    serve_max_wait_s: float = Field(default=300.0, gt=0, description="Longest `?wait=` a long-poll may ask for.")
    serve_keep_versions: int = Field(default=256, ge=1, description="Versions per playbook `combee serve` keeps for "
                                     "GET /playbooks/{id}/versions/{v} (older ones: 410, read the topic).")

    @field_validator("allowed_hosts", "access_keys")
    @classmethod
    def _parsable_door(cls, value: str, info: Any) -> str:
        from combee_core.serve.access_keys import KeyRing
        from combee_core.serve.doors import parse_hosts

        if info.field_name == "allowed_hosts":
            parse_hosts(value)
        else:
            KeyRing.parse(value)
        return value

    @field_validator("access_keys_file", "http_tls_cert", "http_tls_key")
    @classmethod
    def _blank_path_is_none(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("http_tls_key")
    @classmethod
    def _tls_pair(cls, value: str | None, info: Any) -> str | None:
        if bool(info.data.get("http_tls_cert")) != bool(value):
            raise ValueError("COMBEE_HTTP_TLS_CERT and COMBEE_HTTP_TLS_KEY go together: set both, or neither")
        return value
