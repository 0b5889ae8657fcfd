"""Where a request to an HTTP door may come from (pure; every door binds it: ``combee ui``, ``combee serve``'s HTTP
API and MCP, ``combee otlp-receiver``, the worker's ``/metrics``).

**Host** (DNS rebinding): a door answers only a request whose ``Host`` names it: a loopback name (``localhost``,
``*.localhost``), an IP address (a page that names an address is served by that address, so a rebound name cannot
pose as one), the address the door binds, or a name the operator listed (``COMBEE_ALLOWED_HOSTS``, ``--allow-host``);
any other is refused 421, as the MCP SDK does. A request without ``Host`` (HTTP/1.0, not a browser) is let through.

**Origin** (cross-site requests): a request that carries ``Origin`` (every browser ``fetch``, every form post) is
answered only when the origin is the door itself (same scheme-less host and port as ``Host``) or a name the operator
listed, any port; otherwise 403, whatever token or key it carries. ``Origin: null`` (a sandboxed frame, a file) is
refused. Requests without ``Origin`` (curl, agents, the OTLP exporters) are not browsers' cross-site requests.

**Headers**: :data:`PAGE_HEADERS` on every answer of the review page (CSP with script only from the page's own
origin and none inline, no framing, no referrer, no sniffing), :data:`API_HEADERS` on the JSON doors.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from combee_core.errors import CombeeError

MISDIRECTED = 421
FORBIDDEN = 403

WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
"""Bind addresses that mean every interface: they name no host a client would use."""

PAGE_HEADERS: dict[str, str] = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' "
                               "data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""What the review page's answers carry: no inline script runs (the page's one script, its keyboard shortcuts, is a
file from the page's own origin), styles only inline, forms post only to the page itself, nothing frames it, no
address (nor a ``?token=``) leaks to another site in a Referer. Not ``no-referrer``: under it a browser sends
``Origin: null`` with the page's own form posts, which the Origin check must refuse (a sandboxed frame sends the
same)."""

API_HEADERS: dict[str, str] = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""What the JSON doors' answers carry (a browser opening one renders nothing active and leaks nothing)."""


class DoorConfigError(CombeeError, ValueError):
    """An allowed-host list that cannot be used (the message names the setting)."""


def parse_hosts(value: str | Iterable[str]) -> list[str]:
    """``COMBEE_ALLOWED_HOSTS`` (comma-separated) or repeated ``--allow-host``: host names, without scheme or port."""
    items = value.split(",") if isinstance(value, str) else [part for v in value for part in v.split(",")]
    hosts = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if "/" in item or " " in item:
            raise DoorConfigError(f"COMBEE_ALLOWED_HOSTS (or --allow-host): {item!r} is not a host name (no scheme, "
                                  "path or port: e.g. review.example.com)")
        hosts.append(_normal(_split_host(item)[0]))
    return hosts


def _normal(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _split_host(value: str) -> tuple[str, str]:
    """``(host, port)`` of a ``Host`` header value or netloc (port ``""`` when absent; IPv6 in brackets)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.removeprefix(":")
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port
    return value, ""


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class DoorPolicy:
    """Which ``Host`` and ``Origin`` a door answers (:meth:`refusal`)."""

    names: frozenset[str]
    """Host names allowed besides loopback names and IP addresses: the bound one and the operator's."""
    listed: frozenset[str] = frozenset()
    """The operator's names: an ``Origin`` on one of them is allowed on any port (a reverse proxy's)."""
    door: str = "this door"

    @classmethod
    def for_bind(cls, bind_host: str, allowed: str | Iterable[str] = (), door: str = "this door") -> DoorPolicy:
        listed = frozenset(parse_hosts(allowed))
        bound = _normal(bind_host)
        names = listed | ({bound} if bound not in WILDCARD_BINDS else set())
        return cls(names=frozenset(names), listed=listed, door=door)

    def host_allowed(self, host: str) -> bool:
        """Whether a host name (no port) may be answered."""
        host = _normal(host)
        return (host == "localhost" or host.endswith(".localhost") or _is_ip(host) or host in self.names)

    def refusal(self, host_header: str | None, origin: str | None, *, tls: bool = False) -> tuple[int, str] | None:
        """``(status, one-line reason)`` when the request must be refused, else None."""
        if host_header is not None:
            host, _ = _split_host(host_header)
            if not self.host_allowed(host):
                return MISDIRECTED, (f"{self.door} does not answer Host {host_header[:80]!r} (DNS rebinding guard): "
                                     "add the name to COMBEE_ALLOWED_HOSTS (or --allow-host) if clients use it")
        if origin is None:
            return None
        if not self._origin_allowed(origin, host_header, tls):
            return FORBIDDEN, (f"{self.door} refuses requests from origin {origin[:80]!r}: only its own pages, or "
                               "a name in COMBEE_ALLOWED_HOSTS, may call it from a browser")
        return None

    def _origin_allowed(self, origin: str, host_header: str | None, tls: bool) -> bool:
        try:
            parts = urlsplit(origin.strip())
            origin_port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null", a file, an extension
        name = _normal(parts.hostname)
        if name in self.listed:
            return True
        if parts.scheme != ("https" if tls else "http"):
            return False
        if host_header is None:
            return False
        host, port = _split_host(host_header)
        default = "443" if tls else "80"
        origin_default = 443 if parts.scheme == "https" else 80
        return (name == _normal(host) and self.host_allowed(name)
                and str(origin_port or origin_default) == (port or default))
