"""The settings of ``combee serve`` (part of :class:`combee_core.settings.CombeeSettings`, set from
``COMBEE_SERVE_*`` like every setting)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ServeSettings(BaseModel):
    """``combee serve``'s fields of :class:`~combee_core.settings.CombeeSettings`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    serve_host: str = Field(default="127.0.0.1", description="Address `combee serve` binds (HTTP and MCP over "
                            "HTTP); beyond loopback it needs serve_token.")
    serve_port: int = Field(default=8765, ge=0, le=65535, description="`combee serve` HTTP port (0: any free one).")
    serve_mcp_port: int | None = Field(default=None, ge=0, le=65535, description="`combee serve` MCP streamable-HTTP "
                                       "port (none: no MCP over HTTP; `--mcp stdio` serves MCP on stdin/stdout).")
    serve_token: SecretStr | None = Field(default=None, description="Bearer token `combee serve` requires on every "
                                          "request (required when it binds beyond loopback).")
    serve_max_wait_s: float = Field(default=300.0, gt=0, description="Longest `?wait=` a long-poll may ask for.")
    serve_keep_versions: int = Field(default=256, ge=1, description="Versions per playbook `combee serve` keeps for "
                                     "GET /playbooks/{id}/versions/{v} (older ones: 410, read the topic).")
