"""`HOST:PORT` strings, as listeners, the status endpoint and uplink remotes write them.

A bottom module: every package may parse an address; none has to import another's config.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

DEFAULT_PORT = 1883


class HostPort(NamedTuple):
    """A parsed `HOST:PORT` (the host without IPv6 brackets)."""

    host: str
    port: int


def parse_host_port(value: str, default_port: int = DEFAULT_PORT) -> HostPort:
    """Split `HOST:PORT` (`[v6]:PORT` for IPv6); a bare host gets `default_port` (1883)."""
    text = value.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{value!r}: missing host (expected HOST:PORT)")
    port = default_port
    if port_text:
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"{value!r}: port must be a number from 0 to 65535")
        port = int(port_text)
    return HostPort(host, port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

