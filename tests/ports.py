"""Ports on 127.0.0.1 for the servers tests start: one free now, and whether one accepts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS's pick; a server started next may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int) -> bool:
    """Whether a server accepts connections on ``port`` now (a connect bounded by 1 s)."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0
