"""Chat channels: each adapts one transport to the kernel's Inbound/Outbound contract."""

from __future__ import annotations


def host_port(host: str, port: int) -> str:
    """``host:port`` as it is written in a URL: an IPv6 address in brackets (``[::1]:80``).

    A host name never contains ``:``, so one that does is an IPv6 address.
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
