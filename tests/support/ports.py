"""The one free-port helper."""

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
